"""The machine a benchmark ran on, for the reports in docs/benchmarks.md."""

from __future__ import annotations

import os
import platform


def machine(**versions: str) -> dict[str, object]:
    """CPU model, cores, whether virtualized, Python, platform, plus the given package versions."""
    cpu = "unknown"
    virtualized = False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and cpu == "unknown":
                    cpu = value.strip()
                elif key.strip() == "flags":
                    virtualized = virtualized or "hypervisor" in value.split()
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "virtualized": virtualized,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        **versions,
        "platform": platform.platform(),
    }
