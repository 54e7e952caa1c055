"""The Vitis AI release of each target's boards and the pinned image that compiles for it
(pipeline/targets/releases.py; docs/targets.md#releases-and-images)."""
import os
import re

import pytest

from pipeline import targets
from pipeline.targets import releases
from tests.support import REPO

PINNED = re.compile(r"^xilinx/vitis-ai-pytorch-cpu:ubuntu2004-(\d+\.\d+)\.\d+\.\d+$")


def test_every_target_knows_its_board_release_and_compile_image():
    for name, entry in targets.TARGETS.items():
        row = releases.FAMILY_RELEASES[entry.family]
        assert entry.release is row, name
        assert entry.board_release == row.board_release
        assert row.source.strip(), "%s: no source" % entry.family
        if row.compile_release is None:
            assert entry.compile_image is None, name
        else:
            assert entry.compile_image == releases.RELEASES[row.compile_release].image, name
        assert set(row.board_images) <= set(entry.boards) or not entry.boards, name
    assert set(releases.FAMILY_RELEASES) == {e.family for e in targets.TARGETS.values()}


@pytest.mark.parametrize("name,board,compiles_in", [
    ("DPUCZDX8G_ISA1_B4096", "3.0", "3.5"),     # 3.0 board images; AMD's 3.5 MPSoC quickstart compiles in 3.5
    ("DPUCZDX8G_ISA1_B512", "3.0", "3.5"),
    ("DPUCVDX8G_ISA3_C32B3", "3.0", "3.0"),     # VCK190: Vitis-AI issue #1476
    ("DPUCVDX8H_ISA1_F2W2_8PE", "3.0", "3.0"),  # VCK5000: same issue
    ("DPUCV2DX8G_ISA1_C20B14", "3.5", "3.5"),   # VEK280, V70
    ("DPUCAHX8H_ISA2_DWC", "2.5", None),         # board_setup_alveo.rst@v3.0
    ("DPUCADF8H_ISA0", "2.5", None),
    ("DPUCAHX8L_ISA0", "1.4.1", None),
    ("DPUCZDI4G_ISA0_B4096_DEMO_SSD", None, None),  # no source names its boards
])
def test_release_per_family(name, board, compiles_in):
    entry = targets.get_target(name)
    assert entry.board_release == board
    assert entry.release.compile_release == compiles_in
    image, known = releases.compile_image(entry.family)
    assert known == (compiles_in is not None)
    assert image == (releases.RELEASES[compiles_in].image if compiles_in else releases.pipeline_image())


def test_mpsoc_board_images_are_the_3_0_ones():
    images = targets.get_target("DPUCZDX8G_ISA1_B4096").release.board_images
    assert images == {"ZCU102": "xilinx-zcu102-dpu-v2022.2-v3.0.0.img.gz",
                      "ZCU104": "xilinx-zcu104-dpu-v2022.2-v3.0.0.img.gz",
                      "KV260": "xilinx-kv260-dpu-v2022.2-v3.0.0.img.gz"}


def test_images_are_pinned_never_latest():
    for version, release in releases.RELEASES.items():
        m = PINNED.match(release.image)
        assert m and m.group(1) == version == release.version, release.image
        assert "latest" not in release.image
    assert releases.RELEASES["3.5"].image == "xilinx/vitis-ai-pytorch-cpu:ubuntu2004-3.5.0.306"
    assert releases.RELEASES["3.0"].image == "xilinx/vitis-ai-pytorch-cpu:ubuntu2004-3.0.0.106"
    assert releases.pipeline_image() == releases.RELEASES["3.5"].image


def test_only_the_3_5_image_hosts_the_package():
    # pyproject.toml's requires-python is the floor PIPELINE_PYTHON states
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        floor = re.search(r'^requires-python = ">=(\d+)\.(\d+)"', f.read(), re.M)
    assert floor and tuple(int(g) for g in floor.groups()) == releases.PIPELINE_PYTHON
    assert releases.RELEASES["3.5"].hosts_pipeline and releases.RELEASES["3.5"].python == "3.8"
    assert not releases.RELEASES["3.0"].hosts_pipeline and releases.RELEASES["3.0"].python == "3.7"
    assert releases.RELEASES[releases.PIPELINE_RELEASE].hosts_pipeline


def test_the_dockerfile_default_is_the_pipeline_image():
    with open(os.path.join(REPO, "docker", "Dockerfile")) as f:
        args = re.findall(r"^ARG VITIS_AI_IMAGE=(\S+)$", f.read(), re.M)
    assert args == [releases.pipeline_image()]


def test_no_other_file_writes_an_image_tag():
    """One owner per image tag: pipeline/targets/releases.py (and the Dockerfile's copy, checked above)."""
    tag = re.compile(r"vitis-ai-pytorch-(?:cpu|gpu|rocm):[A-Za-z0-9._-]+")
    found = []
    for folder in ("pipeline", "scripts", "docker", "configs"):
        for root, _, files in os.walk(os.path.join(REPO, folder)):
            for name in files:
                path = os.path.join(root, name)
                if name.endswith((".py", ".sh", ".yaml", ".md")) or name == "Dockerfile":
                    with open(path, errors="replace") as f:
                        found += ["%s: %s" % (os.path.relpath(path, REPO), t) for t in tag.findall(f.read())]
    owners = {"pipeline/targets/releases.py", "docker/Dockerfile", "docker/README.md"}
    assert [f for f in found if f.split(": ")[0] not in owners] == []


def test_format_targets_shows_the_releases_and_images():
    text = targets.format_targets()
    header = text.splitlines()[0]
    assert header.split()[-4:] == ["boards", "run", "compiles", "in"]
    b4096 = [line for line in text.splitlines() if line.startswith("DPUCZDX8G_ISA1_B4096 ")][0]
    assert b4096.split()[-2:] == ["3.0", "3.5"]
    vck190 = [line for line in text.splitlines() if line.startswith("DPUCVDX8G_ISA3_C32B3 ")][0]
    assert vck190.split()[-2:] == ["3.0", "3.0"]
    demo = [line for line in text.splitlines() if line.startswith("DPUCZDI4G_ISA0_B4096_DEMO_SSD ")][0]
    assert demo.split()[-2:] == ["?", "?"]
    for release in releases.RELEASES.values():
        assert release.image in text
    assert "issue #1476" in text and "xilinx-kv260-dpu-v2022.2-v3.0.0.img.gz" in text
