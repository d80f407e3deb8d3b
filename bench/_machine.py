"""The machine a benchmark ran on, for the reports in docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path


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


def client_machine_text() -> str:
    """The machine in one line, with the versions of the HTTP client stack (openai, httpx2 or
    httpx): what the judge benchmarks name."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in ("openai", "httpx2", "httpx"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            pass
    info = machine(**versions)
    virt = ", virtual machine" if info["virtualized"] else ""
    return (f"{info['cpu']}{virt}, {info['cores']} cores, {info['python']}, "
            + ", ".join(f"{name} {v}" for name, v in versions.items()))


def compile_bytecode(tree: Path) -> None:
    """Write the bytecode of ``tree``'s tracebench package (``__pycache__``, ignored by git), as
    an installed package has it: pip compiles at install time, while a source checkout run with
    ``PYTHONDONTWRITEBYTECODE`` set (as on these machines) compiles every module at every start,
    which a user never pays. Python checks each file's bytecode against its source as usual."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(tree) / "tracebench")], check=True,
                   stdout=subprocess.DEVNULL)


def source_trees(ap, root: Path, against: Path | None) -> dict[str, Path]:
    """The trees a bench compares: this one and, with ``--against``, another (a folder holding
    tracebench/; ``ap.error`` otherwise), each with its bytecode written (:func:`compile_bytecode`)."""
    trees = {"this tree": root}
    if against is not None:
        if not (against / "tracebench" / "__init__.py").is_file():
            ap.error(f"--against {against}: holds no tracebench/ package")
        trees["against"] = against.resolve()
    for tree in trees.values():
        compile_bytecode(tree)
    return trees
