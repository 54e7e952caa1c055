"""The Vitis AI release each DPU family's boards run, and the image whose ``vai_c_xir`` compiles for it.

Two literal tables, read by the target registry (``DpuTarget.board_release``, ``.compile_image``), the
compile plan, ``python -m pipeline targets`` and ``scripts/docker_run.sh`` (through
``pipeline.targets.docker_image``, on the host: this module imports only the standard library).
Sources, per row below and in docs/targets.md#releases-and-images:

- Board images: the board setup pages of the v3.0 tag (``board_setup/mpsoc/board_setup_mpsoc.rst``,
  ``board_setup/vck190/board_setup_vck190.rst``), the v3.5 quickstarts (``quickstart/mpsoc.rst``
  still downloads the 3.0 ZCU102/ZCU104/KV260 images; ``quickstart/vek280.rst`` the 3.5 VEK280 one) and
  ``docsrc/source/docs/reference/release_notes.rst@v3.5`` ("No pre-build board image updates in 3.5"
  for DPUCZDX8G, DPUCVDX8G and DPUCVDX8H).
- Compile image: the 3.5 MPSoC quickstart quantizes and compiles in the 3.5 image for the 3.0 board
  images; AMD points VCK190/VCK5000 users to the 3.0 toolchain (Vitis-AI issue #1476).
- Image tags: AMD's docs name only ``:latest`` (the 3.5 image today); the numeric Docker Hub tags are
  the ones used publicly (third-party), the Python versions are the images' conda files
  (``docker/conda/cpu_conda/vitis-ai-pytorch.yml`` at v3.0 and v3.5).
"""
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

# pyproject.toml's requires-python: this package does not install on an older Python.
PIPELINE_PYTHON = (3, 8)


@dataclass(frozen=True)
class Release:
    """One Vitis AI release's PyTorch CPU image: a pinned Docker Hub tag, never ``latest``, and the
    Python and torch of its ``vitis-ai-pytorch`` conda env."""

    version: str
    image: str
    python: str
    torch: str
    source: str

    @property
    def hosts_pipeline(self) -> bool:
        """Whether this package runs in the image (its Python is at least ``PIPELINE_PYTHON``)."""
        return tuple(int(p) for p in self.python.split(".")) >= PIPELINE_PYTHON


@dataclass(frozen=True)
class FamilyRelease:
    """What release a DPU family's boards run and which release's ``vai_c_xir`` compiles for it.

    ``board_release``/``compile_release`` are None where the sources do not settle it;
    ``board_images`` maps a board to AMD's prebuilt SD card image (cards have none).
    """

    board_release: Optional[str]
    compile_release: Optional[str]
    source: str
    board_images: Dict[str, str] = field(default_factory=dict)


RELEASES = {
    "3.5": Release("3.5", "xilinx/vitis-ai-pytorch-cpu:ubuntu2004-3.5.0.306", "3.8", "1.13.1",
                   "Docker Hub tag used publicly (third-party); Python 3.8: vitis-ai-pytorch.yml@v3.5; "
                   ":latest is this release"),
    "3.0": Release("3.0", "xilinx/vitis-ai-pytorch-cpu:ubuntu2004-3.0.0.106", "3.7", "1.12.1",
                   "Docker Hub tag used publicly (third-party); Python 3.7: vitis-ai-pytorch.yml@v3.0"),
}  # type: Dict[str, Release]

# The release whose image runs this package (scripts/docker_run.sh, docker/Dockerfile's default).
PIPELINE_RELEASE = "3.5"

FAMILY_RELEASES = {
    "DPUCZDX8G": FamilyRelease(
        "3.0", "3.5",
        "board images 3.0 only (board_setup_mpsoc.rst@v3.0; release_notes.rst@v3.5: no board image updates); "
        "quickstart/mpsoc.rst@v3.5 compiles in the 3.5 image and runs on the 3.0 board images",
        {"ZCU102": "xilinx-zcu102-dpu-v2022.2-v3.0.0.img.gz", "ZCU104": "xilinx-zcu104-dpu-v2022.2-v3.0.0.img.gz",
         "KV260": "xilinx-kv260-dpu-v2022.2-v3.0.0.img.gz"}),
    "DPUCVDX8G": FamilyRelease(
        "3.0", "3.0",
        "board image 3.0 only (board_setup_vck190.rst@v3.0; release_notes.rst@v3.5: no IP, TRD or board image "
        "updates); AMD: VCK190 needs Vitis AI 3.0, its DPU was not updated after 3.0 (Vitis-AI issue #1476)",
        {"VCK190": "xilinx-vck190-dpu-v2022.2-v3.0.0.img.gz"}),
    "DPUCVDX8H": FamilyRelease(
        "3.0", "3.0",
        "DPUCVDX8H IP 1.3 'not updated' in 3.5 (version_compatibility.rst@v3.5); AMD: VCK5000 needs Vitis AI 3.0 "
        "(Vitis-AI issue #1476)"),
    "DPUCV2DX8G": FamilyRelease(
        "3.5", "3.5",
        "general access in 3.5 (release_notes.rst@v3.5); quickstart/vek280.rst and v70.rst@v3.5 compile in the "
        "3.5 image; 3.0 had only the early-access ISA0 target, which is not in this registry",
        {"VEK280": "amd-vek280-dpu-v2023.1-v3.5.0.img.gz"}),
    "DPUCAHX8H": FamilyRelease(
        "2.5", None,
        "board_setup_alveo.rst@v3.0: DPUCAHX8H/DPUCAHX8H-DWC, U50LV and U55C no longer updated since 2.5, use "
        "Vitis AI 2.5; no image is known to compile this project's xmodel for it"),
    "DPUCADF8H": FamilyRelease(
        "2.5", None,
        "board_setup_alveo.rst@v3.0: DPUCADF8H, U200 and U250 no longer updated since 2.5, use Vitis AI 2.5; "
        "no image is known to compile this project's xmodel for it"),
    "DPUCAHX8L": FamilyRelease(
        "1.4.1", None,
        "board_setup_alveo.rst@v3.0: DPUCAHX8L, U50 and U280 no longer updated since 2.0, use Vitis AI 1.4.1; "
        "no image is known to compile this project's xmodel for it"),
    "DPUCZDI4G": FamilyRelease(
        None, None,
        "unknown: only the target_factory prototxts (v2.0 to v3.5) name it; no board setup page, board image or "
        "release note does"),
}  # type: Dict[str, FamilyRelease]


def family_release(family: str) -> FamilyRelease:
    """The ``FAMILY_RELEASES`` row of a DPU family (KeyError for a family without one)."""
    return FAMILY_RELEASES[family]


def pipeline_image() -> str:
    """The image this package runs in: ``PIPELINE_RELEASE``'s pinned tag."""
    return RELEASES[PIPELINE_RELEASE].image


def compile_image(family: str) -> Tuple[str, bool]:
    """``(image, known)``: the pinned image whose ``vai_c_xir`` compiles for ``family``, known True; or,
    where no release is known to compile for it, ``pipeline_image()`` with known False."""
    release = FAMILY_RELEASES[family].compile_release
    if release is None:
        return pipeline_image(), False
    return RELEASES[release].image, True
