"""``trace library audit``: near-duplicate images inside a library, and against training-set hashes.

Two stages (the issue's measurement: a perceptual hash alone misses 5%-crop copies at a tight
threshold and pairs distinct synthetic scenes at a loose one):

1. **Candidates.** Every image gets two 64-bit perceptual hashes, computed as the ``imagehash``
   package computes them (so a list made with it reads here): **pHash** (grey 32x32, a 2-D DCT,
   the 8x8 lowest frequencies against their median) and **dHash** (grey 9x8, each pixel against
   its right neighbour). A pair is a candidate when either Hamming distance is within a loose
   threshold (:class:`AuditOptions`).
2. **Confirmation.** ORB keypoints of each candidate (grey, resized to 256 pixels on the longer
   side, so a half-size copy is matched at the original's scale), matched both ways (Hamming,
   cross-checked), then a similarity transform (rotation, uniform scale, translation) fitted by
   RANSAC (OpenCV's ``estimateAffinePartial2D``). A pair is confirmed when the transform has
   enough inliers, its scale is that of a copy (0.5 to 2) and, with one image warped onto the
   other, their overlap agrees: the grey values correlate (Pearson's r) and almost no pixel
   differs beyond a gain-and-offset fit of one on the other (which a brightness or contrast
   change leaves alone). Two distinct scenes that share a drawn background or figure match its
   keypoints, but an entity in one and not the other is a patch of differing pixels.

Against a list of training-set hashes (``--against``) only the hashes are at hand, so a library
image is flagged by stage 1 alone, with the stricter thresholds of :class:`AuditOptions`: both
distances within them. The file holds one image a line, ``PHASH DHASH [NAME]`` (16 hex digits
each; ``#`` starts a comment), as ``trace library hashes DIR`` prints them.

OpenCV is the ``audit`` extra (``pip install 'tracebench[audit]'``, the headless build): ORB,
the matching and RANSAC compiled, in the implementation most papers use. Without it ``trace library audit`` is one line naming the
extra; the hashes need Pillow and numpy only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..errors import TraceError
from ..images import ImageRefused, open_image
from ..safepaths import inside
from ._io import load_library
from ._models import TaggedImage

__all__ = ["AUDIT_FILE", "AuditOptions", "AuditReport", "FlaggedPair", "ImageHashes", "TrainingHash", "audit_library",
           "flagged_ids", "image_hashes", "library_hashes", "read_audit", "read_training_hashes", "write_audit"]

AUDIT_FILE = "audit.json"
FEATURE_SIDE = 256  # ORB sees every image with this longer side
MAX_MATCH_BITS = 64  # a keypoint match differs in at most this many of ORB's 256 bits
DIFFERING_LEVELS = 24  # grey levels (of 255) past which an aligned pixel differs
_HEX = re.compile(r"[0-9a-fA-F]{16}")


@dataclass(frozen=True)
class AuditOptions:
    """The thresholds of an audit. The defaults are measured (docs/benchmarks.md, "Library audit"):
    on the synthetic library they find every copy of four perturbations and no pair of distinct
    images."""

    phash_candidates: int = 20  # stage 1 in a library: a pair within this pHash distance ...
    dhash_candidates: int = 20  # ... or this dHash distance is confirmed by feature matching
    min_inliers: int = 12  # stage 2: RANSAC inliers of the similarity transform
    min_correlation: float = 0.9  # stage 2: Pearson's r of the aligned grey values, at least
    max_differing: float = 0.025  # stage 2: the share of the overlap that differs, at most
    phash_against: int = 10  # a training hash flags an image within this pHash distance ...
    dhash_against: int = 10  # ... and this dHash distance
    features: int = 500  # ORB keypoints per image

    def __post_init__(self) -> None:
        for name in ("phash_candidates", "dhash_candidates", "phash_against", "dhash_against"):
            if not 0 <= getattr(self, name) <= 64:
                raise TraceError(f"{name}: {getattr(self, name)} is not a distance of 64-bit hashes (0 to 64)")
        if self.min_inliers < 3 or self.features < self.min_inliers:
            raise TraceError(f"min_inliers: {self.min_inliers} must be at least 3 and at most features ({self.features})")
        if not -1.0 <= self.min_correlation <= 1.0:
            raise TraceError(f"min_correlation: {self.min_correlation} is not a correlation (-1 to 1)")
        if not 0.0 <= self.max_differing <= 1.0:
            raise TraceError(f"max_differing: {self.max_differing} is not a share (0 to 1)")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FlaggedPair(_Record):
    """One near-duplicate: two library images (``library``), or a library image and a training hash
    (``training``)."""

    kind: Literal["library", "training"] = Field(description="library: two images of the library; training: "
                                                             "a library image and a line of the --against file")
    a: str = Field(description="the library image id")
    b: str = Field(description="library: the other image id; training: the hash line's name (or 'line N')")
    phash_distance: int = Field(ge=0, le=64, description="Hamming distance of the 64-bit pHashes")
    dhash_distance: int = Field(ge=0, le=64, description="Hamming distance of the 64-bit dHashes")
    inliers: int | None = Field(default=None, description="library: RANSAC inliers of the similarity transform")
    correlation: float | None = Field(default=None, description="library: Pearson's r of the aligned grey values")
    differing: float | None = Field(default=None, description="library: share of the aligned overlap whose grey values "
                                                              "differ beyond a gain-and-offset fit")


class AuditReport(_Record):
    """``audit.json``: what ``trace library audit`` found, and how."""

    library: str = Field(description="the library's name")
    content_hash: str = Field(description="the library's content hash (library.json) when audited")
    images: int = Field(description="images audited")
    against: str | None = Field(default=None, description="the --against file, as given")
    training_hashes: int = Field(default=0, description="lines of the --against file")
    thresholds: dict[str, float] = Field(description="the AuditOptions of the audit")
    candidates: int = Field(description="library pairs within the loose hash thresholds (stage 1)")
    pairs: tuple[FlaggedPair, ...] = Field(description="flagged pairs, library ones first, by image id")
    flagged: tuple[str, ...] = Field(description="the ids of the library images in a flagged pair, sorted")


class ImageHashes(_Record):
    """A library image's two perceptual hashes, as 16 hex digits each."""

    id: str
    phash: str
    dhash: str


class TrainingHash(_Record):
    """A line of an --against file."""

    line: int
    name: str
    phash: int
    dhash: int


# ------------------------------------------------------------------------------------ hashes


def _bits_hex(bits) -> str:
    return f"{int(''.join('1' if b else '0' for b in bits.flatten()), 2):016x}"


def _dct_matrix(n: int):
    import numpy as np

    k = np.arange(n)[:, None]
    return np.cos(np.pi * k * (2 * np.arange(n)[None, :] + 1) / (2 * n))


def image_hashes(image) -> tuple[str, str]:
    """(pHash, dHash) of a Pillow image, each 16 hex digits: ``imagehash.phash`` and
    ``imagehash.dhash`` with their default sizes (the DCT's scale does not change the bits)."""
    import numpy as np
    from PIL import Image

    grey = image.convert("L")
    pixels = np.asarray(grey.resize((32, 32), Image.LANCZOS), dtype=float)
    dct = _dct_matrix(32)
    low = (dct @ pixels @ dct.T)[:8, :8]
    small = np.asarray(grey.resize((9, 8), Image.LANCZOS), dtype=float)
    return _bits_hex(low > np.median(low)), _bits_hex(small[:, 1:] > small[:, :-1])


def _library(root: Path):
    info, records = load_library(root)
    if not records:
        raise TraceError(f"{root}: the library holds no images")
    return info, records


def _open_grey(root: Path, record: TaggedImage):
    """The image of ``record``, decoded (RGB), through the path and size checks."""
    path = inside(root, record.path, f"{root}: image {record.id}", "library")
    try:
        with open_image(path) as image:
            return image.convert("RGB")
    except ImageRefused as err:
        raise TraceError(f"{root}: image {record.id}: {record.path}: {err}") from None
    except OSError as err:
        raise TraceError(f"{root}: image {record.id}: {record.path}: cannot read ({err.strerror or err})") from None


def library_hashes(root: Path) -> list[ImageHashes]:
    """The perceptual hashes of every image of the library at ``root``, in the order of its tags."""
    root = Path(root)
    _, records = _library(root)
    out = []
    for record in records:
        phash, dhash = image_hashes(_open_grey(root, record))
        out.append(ImageHashes(id=record.id, phash=phash, dhash=dhash))
    return out


def read_training_hashes(path: Path) -> list[TrainingHash]:
    """The lines of an --against file: ``PHASH DHASH [NAME]``, blank lines and ``#`` comments
    skipped; a malformed line is a TraceError ``FILE:LINE: ...``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TraceError(f"{path}: cannot read as UTF-8 text ({getattr(err, 'strerror', None) or err})") from None
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        fields = line.split("#", 1)[0].split(None, 2)
        if not fields:
            continue
        if len(fields) < 2 or not (_HEX.fullmatch(fields[0]) and _HEX.fullmatch(fields[1])):
            raise TraceError(f"{path}:{number}: expected PHASH DHASH [NAME], each hash 16 hex digits "
                             "(trace library hashes DIR prints them)")
        name = fields[2].strip() if len(fields) > 2 else f"line {number}"
        out.append(TrainingHash(line=number, name=name, phash=int(fields[0], 16), dhash=int(fields[1], 16)))
    if not out:
        raise TraceError(f"{path}: no hashes (expected lines PHASH DHASH [NAME])")
    return out


# ------------------------------------------------------------------------------------ stages


def _as_words(hexes: Sequence[str]):
    import numpy as np

    return np.array([int(h, 16) for h in hexes], dtype=np.uint64)


def _distances(left, right):
    """Hamming distances of every 64-bit word of ``left`` to every word of ``right``."""
    import numpy as np

    xor = left[:, None] ^ right[None, :]
    return np.unpackbits(xor.view(np.uint8).reshape(*xor.shape, 8), axis=-1).sum(axis=-1, dtype=np.int64)


def _candidates(phash, dhash, options: AuditOptions) -> list[tuple[int, int, int, int]]:
    """Library pairs (i < j) within either loose threshold, with their two distances."""
    import numpy as np

    p, d = _distances(phash, phash), _distances(dhash, dhash)
    close = (p <= options.phash_candidates) | (d <= options.dhash_candidates)
    i, j = np.nonzero(np.triu(close, k=1))
    return [(int(a), int(b), int(p[a, b]), int(d[a, b])) for a, b in zip(i, j)]


def _cv2():
    try:
        import cv2
    except ImportError:
        raise TraceError("trace library audit needs OpenCV: pip install 'tracebench[audit]'") from None
    cv2.setNumThreads(1)
    return cv2


@dataclass
class _Features:
    grey: object  # uint8 array, FEATURE_SIDE on its longer side
    points: object  # float32 (n, 2)
    descriptors: object  # uint8 (n, 32) or None


def _features(cv2, image, options: AuditOptions) -> _Features:
    import numpy as np
    from PIL import Image

    scale = FEATURE_SIDE / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    grey = np.asarray(image.convert("L").resize(size, Image.BILINEAR), dtype=np.uint8)
    orb = cv2.ORB_create(nfeatures=options.features, edgeThreshold=15, patchSize=15)
    keypoints, descriptors = orb.detectAndCompute(grey, None)
    points = np.array([k.pt for k in keypoints], dtype=np.float32).reshape(-1, 2)
    return _Features(grey, points, descriptors)


def _confirm(cv2, left: _Features, right: _Features, options: AuditOptions) -> tuple[int, float, float] | None:
    """(inliers, correlation, differing share) of a pair that feature matching confirms, else None."""
    import numpy as np

    if left.descriptors is None or right.descriptors is None:
        return None
    matches = [m for m in cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True).match(left.descriptors, right.descriptors)
               if m.distance <= MAX_MATCH_BITS]
    if len(matches) < options.min_inliers:
        return None
    src = left.points[[m.queryIdx for m in matches]]
    dst = right.points[[m.trainIdx for m in matches]]
    transform, mask = cv2.estimateAffinePartial2D(src, dst, method=cv2.RANSAC, ransacReprojThreshold=3.0,
                                                  maxIters=1000, confidence=0.995, refineIters=10)
    if transform is None or int(mask.sum()) < options.min_inliers:
        return None
    scale = float(np.hypot(transform[0, 0], transform[1, 0]))
    if not 0.5 <= scale <= 2.0:
        return None
    agreement = _aligned_agreement(cv2, left.grey, right.grey, transform)
    if agreement is None or agreement[0] < options.min_correlation or agreement[1] > options.max_differing:
        return None
    return int(mask.sum()), round(agreement[0], 4), round(agreement[1], 4)


def _aligned_agreement(cv2, left, right, transform) -> tuple[float, float] | None:
    """(Pearson's r, differing share) of ``right`` and ``left`` warped onto it by ``transform``,
    both slightly blurred, over their overlap: the share is that of the overlap whose grey value
    is more than ``DIFFERING_LEVELS`` away from the gain-and-offset fit of one image on the other
    (a brightness change is a fit; an entity that is not in both images is not). None when the
    overlap is under a quarter of ``right`` or flat."""
    import numpy as np

    height, width = right.shape
    blurred = cv2.GaussianBlur(left, (0, 0), 1.5)
    warped = cv2.warpAffine(blurred, transform, (width, height), flags=cv2.INTER_LINEAR, borderValue=0)
    cover = cv2.warpAffine(np.full(left.shape, 255, np.uint8), transform, (width, height), flags=cv2.INTER_NEAREST,
                           borderValue=0)
    cover = cv2.erode(cover, np.ones((7, 7), np.uint8)) == 255
    if cover.sum() < right.size / 4:
        return None
    a, b = warped[cover].astype(float), cv2.GaussianBlur(right, (0, 0), 1.5)[cover].astype(float)
    if a.std() == 0 or b.std() == 0:
        return None
    gain, offset = np.polyfit(a, b, 1)
    differing = float((np.abs(b - (gain * a + offset)) > DIFFERING_LEVELS).mean())
    return float(np.corrcoef(a, b)[0, 1]), differing


# ------------------------------------------------------------------------------------ the audit


def audit_library(root: Path, *, against: Path | None = None, options: AuditOptions = AuditOptions()) -> AuditReport:
    """Audit the library at ``root`` (module docstring): its near-duplicate pairs, and with
    ``against`` (an --against file) its images a training hash is close to."""
    root = Path(root)
    cv2 = _cv2()
    info, records = _library(root)
    training = read_training_hashes(against) if against is not None else []
    images, hashes = [], []
    for record in records:
        image = _open_grey(root, record)
        hashes.append(image_hashes(image))
        images.append(image)
    phash, dhash = _as_words([h[0] for h in hashes]), _as_words([h[1] for h in hashes])
    candidates = _candidates(phash, dhash, options)
    features: dict[int, _Features] = {}
    pairs = []
    for i, j, p, d in candidates:
        for k in (i, j):
            if k not in features:
                features[k] = _features(cv2, images[k], options)
        confirmed = _confirm(cv2, features[i], features[j], options)
        if confirmed is not None:
            pairs.append(FlaggedPair(kind="library", a=records[i].id, b=records[j].id, phash_distance=p,
                                     dhash_distance=d, inliers=confirmed[0], correlation=confirmed[1],
                                     differing=confirmed[2]))
    if training:
        pairs += _against(records, phash, dhash, training, options)
    thresholds = {name: float(getattr(options, name)) for name in AuditOptions.__dataclass_fields__}
    return AuditReport(library=info.name, content_hash=info.content_hash, images=len(records),
                       against=None if against is None else str(against), training_hashes=len(training),
                       thresholds=thresholds, candidates=len(candidates), pairs=tuple(pairs),
                       flagged=tuple(sorted({p.a for p in pairs} | {p.b for p in pairs if p.kind == "library"})))


def _against(records: Sequence[TaggedImage], phash, dhash, training: Sequence[TrainingHash],
             options: AuditOptions) -> list[FlaggedPair]:
    """Library images within both strict thresholds of a training hash."""
    import numpy as np

    p = _distances(phash, np.array([t.phash for t in training], dtype=np.uint64))
    d = _distances(dhash, np.array([t.dhash for t in training], dtype=np.uint64))
    i, j = np.nonzero((p <= options.phash_against) & (d <= options.dhash_against))
    return [FlaggedPair(kind="training", a=records[a].id, b=training[b].name, phash_distance=int(p[a, b]),
                        dhash_distance=int(d[a, b])) for a, b in zip(i, j)]


def write_audit(path: Path, report: AuditReport) -> None:
    """Write ``report`` to ``path`` atomically."""
    from ..jsonfiles import write_json

    write_json(Path(path), report)


def read_audit(path: Path) -> AuditReport:
    """An ``audit.json``; a problem is one line naming the file, the line and the field."""
    from ..jsonfiles import read_json

    return read_json(Path(path), AuditReport)


def read_audit_of(path: Path, library: dict) -> AuditReport:
    """An ``audit.json`` of the library ``library`` (a benchmark manifest's: name, version, content
    hash); an audit of another library (or of this one since changed) is a TraceError: its image
    ids would name other images."""
    report = read_audit(path)
    expected = library.get("content_hash")
    if expected is not None and report.content_hash != expected:
        raise TraceError(f"{path}: an audit of library {report.library!r} (content hash {report.content_hash[:12]}), "
                         f"not of the library the benchmark was sampled from ({library.get('name')!r}, "
                         f"{str(expected)[:12]}): audit that library")
    return report


def flagged_ids(reports: Iterable[AuditReport]) -> frozenset[str]:
    """The library image ids flagged by any of ``reports``."""
    return frozenset(i for report in reports for i in report.flagged)
