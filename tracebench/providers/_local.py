"""Providers that run here: a folder of images made elsewhere, a shell command. (The synthetic
zoo and its oracle judge are the zoo's: ``tracebench/zoo/_providers.py``.)"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from ..errors import TraceError
from ..records import sample_name
from ..safepaths import path_problem
from ._base import CallFailed, Generation, Generator
from ._images import digest, image_suffix

__all__ = ["CommandGenerator", "FolderGenerator", "RunImages", "folder_generator", "sample_seed"]


def sample_seed(seed: int, sample: int) -> int:
    """The synthetic zoo's seed for one generation of each case: ``seed`` for the first, a seed
    derived from both for a later one (no two samples of two seeds share one)."""
    if sample == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"tracebench-sample/{seed}/{sample}".encode()).digest()[:4], "big") >> 1

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
SIDECAR = ".json"  # beside an image: {"used_references": ["Image 2", ...]} (optional)


def _sidecar(path: Path, name: str) -> object:
    """The ``used_references`` a JSON file beside an image gives (None: no file, or it does not
    say); a file that is not such JSON is a CallFailed naming it."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CallFailed(f"{name}: not JSON ({type(err).__name__}); want {{\"used_references\": [\"Image 2\", ...]}}") \
            from None
    if not isinstance(data, dict):
        raise CallFailed(f"{name}: not a JSON object; want {{\"used_references\": [\"Image 2\", ...]}}")
    return data.get("used_references")


class FolderGenerator(Generator):
    """``folder:PATH``: images made elsewhere, named by case id (``PATH/<case id>.png`` ...; a later
    generation ``k`` of ``trace run --samples`` ``PATH/<case id>~<k>.png``); an image that is a
    link leaving the folder is not read (an abstention). ``PATH/<case id>.json``,
    if there, says which references were used: ``{"used_references": ["Image 2"]}``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.spec = f"folder:{self.folder}"

    def key(self, case, references):
        return None  # reading a file is not a model call

    def check(self) -> None:
        if not any(p.suffix.lower() in _IMAGE_SUFFIXES for p in self.folder.iterdir()):
            raise TraceError(f"--generator {self.spec}: {self.folder} holds no image "
                             f"({', '.join(_IMAGE_SUFFIXES)}, named by case id)")

    async def generate(self, case, references):  # a file read: not worth a worker thread
        stem = sample_name(case.id, self.sample)  # a later generation (trace run --samples): <case id>~<k>.png
        for suffix in _IMAGE_SUFFIXES:
            name = f"{stem}{suffix}"
            path = self.folder / name
            if path.is_file():
                problem = path_problem(self.folder, name, "generator's folder")
                if problem:
                    raise CallFailed(f"{name}: {problem}")
                side = f"{stem}{SIDECAR}"
                used = None
                if (self.folder / side).is_file():
                    problem = path_problem(self.folder, side, "generator's folder")
                    if problem:
                        raise CallFailed(f"{side}: {problem}")
                    used = _sidecar(self.folder / side, side)
                return Generation(path.read_bytes(), used)  # type: ignore[arg-type]
        raise CallFailed(f"no image for {case.id}{f' (sample {self.sample}: {stem}.png)' if self.sample else ''} "
                         f"in {self.folder}")


def folder_generator(path: str) -> FolderGenerator:
    """``folder:PATH``, the folder checked first."""
    if not Path(path).is_dir():
        raise TraceError(f"--generator folder:{path}: {path} is not a folder")
    return FolderGenerator(Path(path))


class RunImages(FolderGenerator):
    """The images of an earlier run folder, given again so that other judges (or another scale)
    judge the same pixels (``trace rejudge``). It reads ``images/<case id>.png`` (and the
    ``.json`` beside it) as ``folder:`` does, and speaks for the run's generator: its spec,
    its limit on images and its endpoint, so the new run's scores, reports and diagnoses name
    the generator that made the images. A case the run has no image for abstains again."""

    def __init__(self, run_dir: Path, images: Path, manifest) -> None:
        super().__init__(images)
        self.run_dir, self.manifest = Path(run_dir), manifest
        self.spec = manifest.generator
        self.max_images = manifest.max_images

    def endpoint(self):
        return self.manifest.endpoints.get(self.spec)

    def sample_seed(self):
        seeds = self.manifest.sample_seeds  # the run's, when it made several samples with recorded seeds
        return seeds[self.sample] if seeds and self.sample < len(seeds) else None

    def check(self) -> None:
        return None  # a run whose every generation failed holds no image: its cases abstain here as there


class CommandGenerator(Generator):
    """``command:'...'``: a shell command that reads the case as JSON on stdin and writes the image
    to the path given as ``{output}`` in the command (also in $TRACEBENCH_OUTPUT); $TRACEBENCH_SAMPLE
    says which generation of the case it is (0 the first). It may say which references it used in
    ``{output}.json``: ``{"used_references": ["Image 2", ...]}``. The generation options
    (``--generator-option``) are in $TRACEBENCH_GENERATOR_OPTIONS, a JSON object (``{}`` without).

    The JSON is the case record (``cases.jsonl``'s line) with each reference's ``path`` made
    absolute: a copy of the reference image in a temporary folder that lives while the command
    runs (the command needs to know no benchmark folder). Example: examples/commands/.
    """

    def __init__(self, command: str, timeout: float = 600.0) -> None:
        self.command = command
        self.timeout = timeout
        self.spec = f"command:{command}"

    def key(self, case, references):
        return {"adapter": "command", "command": self.command, "case": case.model_dump(mode="json"),
                "images": [digest(r) for r in references]}

    async def generate(self, case, references):
        with tempfile.TemporaryDirectory() as tmp:
            output = Path(tmp) / "output.png"
            given = []
            for k, (ref, data) in enumerate(zip(case.references, references), start=1):
                copy = Path(tmp) / "references" / f"{k}-{Path(ref.path).stem}{image_suffix(data)}"
                copy.parent.mkdir(exist_ok=True)
                copy.write_bytes(data)
                given.append(ref.model_copy(update={"path": str(copy)}))
            stdin = case.model_copy(update={"references": tuple(given)}).model_dump_json().encode()
            command = self.command.replace("{output}", shlex.quote(str(output)))
            env = {**os.environ, "TRACEBENCH_OUTPUT": str(output), "TRACEBENCH_SAMPLE": str(self.sample),
                   "TRACEBENCH_GENERATOR_OPTIONS": json.dumps(dict(self.options), sort_keys=True),
                   **({"TRACEBENCH_SEED": str(seed)} if (seed := self.sample_seed()) is not None else {})}
            proc = await asyncio.create_subprocess_shell(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                                         stderr=subprocess.PIPE, env=env)
            try:
                _, stderr = await asyncio.wait_for(proc.communicate(stdin), self.timeout)
            except asyncio.TimeoutError:
                proc.kill()
                raise CallFailed(f"the command took longer than {self.timeout:.0f} s") from None
            if proc.returncode != 0:
                tail = " ".join(stderr.decode(errors="replace").split())[-200:]
                raise CallFailed(f"the command exited with status {proc.returncode}: {tail}")
            if not output.is_file():
                raise CallFailed("the command wrote no image to {output}")
            used = _sidecar(output.with_name(output.name + SIDECAR), "the command's {output}.json")
            return Generation(output.read_bytes(), used)  # type: ignore[arg-type]
