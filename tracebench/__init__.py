"""tracebench: build, run and diagnose TRACE-Bench-style benchmarks.

The formula language (operators Anchor ``f``, Disentangle ``g``, Apply ``⊕`` and
Compose ``C``) is the spine of every stage; see :mod:`tracebench.formula`.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
