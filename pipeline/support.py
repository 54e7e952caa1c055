"""Which Python and torch this release is proven on, and what that means for the environment at hand.

:data:`PROVEN` is the measured matrix that README.md ("Supported versions") and
docs/environment.md#supported-versions print: each row a Python and torch pair and what was run on it,
when. pyproject.toml's ranges admit what lies between its rows (torch 1.13.1 and up below Python 3.11,
torch 2.13 and up from 3.11); :func:`verdict` says where an environment stands. It imports nothing
heavy: versions come from the interpreter and package metadata.
"""
import platform
import re
from typing import List, NamedTuple, Optional, Tuple


class Proven(NamedTuple):
    """One measured row: Python ``major.minor``, torch release, the date, what ran there."""
    python: str
    torch: str
    date: str
    what: str


IMAGE = "the Vitis AI 3.5 image's versions"
CHECK = "scripts/check_torch.py: the main job, the golden-set tests"
PROVEN = (
    Proven("3.8", "1.13.1", "2026-12-04",
           "%s (torchvision 0.14.1, numpy 1.22.4, protobuf 3.20.3; constraints-image.txt), in CI: the main job, "
           "the fast tests, golden sets bit-exact, the main job's artifacts equal to the pinned environment's for "
           "the same weights" % IMAGE),
    Proven("3.8", "2.4.1", "2026-12-04", "the newest torch for Python 3.8; " + CHECK),
    Proven("3.10", "1.13.1", "2026-12-04", "numpy below 2; " + CHECK),
    Proven("3.11", "2.13.0", "2026-12-04",
           "the pinned CPU stack (constraints.txt), in CI: the main job, the fast and slow tests"),
    Proven("3.11", "2.14.1", "2026-12-04", CHECK),
    Proven("3.11", "2.15.0", "2026-12-04", "the newest torch the package registries serve; " + CHECK),
    Proven("3.12", "2.15.0", "2026-12-04", CHECK),
    Proven("3.13", "2.15.0", "2026-12-04", CHECK),
)
NEWEST_CHECKED = "2.15.0"
NEWEST_PYTHON = (3, 13)
# torch 1.13's tracer finds the target of a tuple unpacking from the caller's bytecode, which Python
# 3.11 changed (an IndexError inside torch.fx, measured: torch 1.13.1, Python 3.11.7); torch 2 reads it otherwise
OLD_TORCH_NEWEST_PYTHON = (3, 10)
# torch releases before 2.3 are built against NumPy 1.x: with NumPy 2 installed, torch.from_numpy
# fails ("Numpy is not available"; measured with torch 1.13.1 and numpy 2.2.6 on Python 3.10)
FIRST_TORCH_FOR_NUMPY_2 = (2, 3)


class Verdict(NamedTuple):
    """``kind``: ``"proven"`` (a row of PROVEN), ``"within"`` (inside the ranges, not itself measured),
    ``"newer"`` (a torch newer than the newest checked) or ``"refused"`` (known not to work);
    ``text``: one sentence for people."""
    kind: str
    text: str


def _release(version: str) -> Tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``; ``"2.16.0.dev20261201"`` -> ``(2, 16, 0)``."""
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3])


def verdict(python: str, torch: Optional[str], numpy: Optional[str] = None) -> Verdict:
    """Where Python ``python`` (``"3.8.18"``) with torch ``torch`` (``"1.13.1+cu117"``, None when absent)
    and numpy ``numpy`` (None: not considered) stands against :data:`PROVEN` and the supported ranges."""
    py = _release(python)[:2]
    if torch is None:
        return Verdict("refused", "torch is not installed: the pipeline needs torch (README, Supported versions)")
    tv = _release(torch)
    if numpy is not None and _release(numpy) >= (2,) and tv < FIRST_TORCH_FOR_NUMPY_2:
        return Verdict("refused", "torch %s is built against NumPy 1.x and cannot read the arrays of the installed "
                       "numpy %s: install numpy below 2 (pip install 'numpy<2')" % (torch, numpy))
    for row in PROVEN:
        if _release(row.python) == py and _release(row.torch) == tv:
            return Verdict("proven", "Python %s with torch %s is proven (%s: %s)" % (row.python, row.torch, row.date,
                                                                                     row.what))
    if tv < (2,) and py > OLD_TORCH_NEWEST_PYTHON:
        return Verdict("refused", "torch %s on Python %d.%d is not supported: torch 1.x's tracer cannot unpack "
                       "tuples on Python 3.11 and later (torch's own bug, fixed in torch 2); use torch 2.13 or newer, "
                       "or Python 3.8 to 3.10 with torch 1.13 (the Vitis AI 3.5 image has Python 3.8)" % (torch, *py))
    if tv < (1, 13, 1):
        return Verdict("refused", "torch %s is older than the oldest supported, 1.13.1 (the Vitis AI 3.5 image's)"
                       % torch)
    if py > NEWEST_PYTHON:
        return Verdict("newer", "Python %d.%d is newer than the newest this release was checked with (%d.%d): run "
                       "`python scripts/check_torch.py --python %d.%d --torch %s` to check it"
                       % (py[0], py[1], NEWEST_PYTHON[0], NEWEST_PYTHON[1], py[0], py[1], torch.split("+")[0]))
    if tv > _release(NEWEST_CHECKED):
        return Verdict("newer", "torch %s is newer than the newest this release was checked with (%s): it is kept, "
                       "but run `python scripts/check_torch.py --torch %s` to check it (main job and golden sets)"
                       % (torch, NEWEST_CHECKED, torch.split("+")[0]))
    return Verdict("within", "Python %d.%d with torch %s lies within the supported ranges but was not itself measured "
                   "(README, Supported versions)" % (py[0], py[1], torch))


def current() -> Verdict:
    """:func:`verdict` of this interpreter and the installed torch and numpy (package metadata; neither
    imported)."""
    from importlib import metadata
    found = []  # type: List[Optional[str]]
    for name in ("torch", "numpy"):
        try:
            found.append(metadata.version(name))
        except metadata.PackageNotFoundError:
            found.append(None)
    return verdict(platform.python_version(), found[0], found[1])
