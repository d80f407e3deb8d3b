"""Test configuration: Hypothesis profiles chosen by an environment variable.

TRACEBENCH_HYPOTHESIS=quick (the default under CI=true), dev (the default elsewhere) or
thorough (on demand: ``TRACEBENCH_HYPOTHESIS=thorough pytest``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))  # tests/strategies.py and helpers

settings.register_profile("quick", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
_default = "quick" if os.environ.get("CI") else "dev"
settings.load_profile(os.environ.get("TRACEBENCH_HYPOTHESIS", _default))
