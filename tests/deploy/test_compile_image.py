"""compile.sh and compile_plan.md name and use the target's compile image, and say which Vitis AI
release the board runs (docs/targets.md#releases-and-images, docs/compiler.md#the-image)."""
import os

import pytest

from pipeline.compilers import plan, vai_c
from pipeline.targets import get_target
from pipeline.targets.releases import RELEASES

IMAGE_3_5 = "xilinx/vitis-ai-pytorch-cpu:ubuntu2004-3.5.0.306"
IMAGE_3_0 = "xilinx/vitis-ai-pytorch-cpu:ubuntu2004-3.0.0.106"


def _plan(tmp_path, target, exported=True, warnings=None):
    run = str(tmp_path / "run" / "compile")
    xmodel = tmp_path / "run" / "export" / "Net_int.xmodel"
    xmodel.parent.mkdir(parents=True)
    if exported:
        xmodel.write_bytes(b"int8")
    arch = get_target(target).arch_json or "/opt/vitis_ai/compiler/arch/x/arch.json"
    argv = vai_c.build_argv(str(xmodel), arch, run, "net")
    files = plan.write_compile_plan(run, argv, target, "vai_c_xir is not on this machine",
                                    config_path="configs/c.yaml", release_warnings=warnings)
    with open(files["plan"]) as f, open(files["script"]) as g:
        return f.read(), g.read(), run, argv


def test_the_images_under_test_are_the_registrys():
    assert RELEASES["3.5"].image == IMAGE_3_5 and RELEASES["3.0"].image == IMAGE_3_0


def test_mpsoc_compiles_in_the_3_5_image_for_a_3_0_board(tmp_path):
    text, script, run, argv = _plan(tmp_path, "DPUCZDX8G_ISA1_B4096")
    assert "# Run it inside the Vitis AI image %s (conda env vitis-ai-pytorch)" % IMAGE_3_5 in script
    assert plan.docker_command(run, argv, IMAGE_3_5) in text
    assert " %s bash -c " % IMAGE_3_5 in plan.docker_command(run, argv)  # the default is the 3.5 image
    assert "- The DPUCZDX8G boards run Vitis AI 3.0 (board images: ZCU102 `xilinx-zcu102-dpu-v2022.2-v3.0.0.img.gz`" \
        in text
    assert "- `compile.sh` runs in `%s`, the Vitis AI 3.5 image, whose `vai_c_xir` compiles for DPUCZDX8G; AMD's " \
           "own flow for these boards compiles there and runs the result on the 3.0 board image." % IMAGE_3_5 in text
    assert "`xdputil query` must report the fingerprint `0x0101000056010407`" in text
    assert "scripts/docker_run.sh configs/c.yaml --steps compile,deploy" in text
    assert "latest" not in text and "latest" not in script


def test_vck190_compiles_in_the_3_0_image_with_compile_sh_alone(tmp_path):
    text, script, run, argv = _plan(tmp_path, "DPUCVDX8G_ISA3_C32B3")
    assert "# Run it inside the Vitis AI image %s " % IMAGE_3_0 in script
    assert plan.docker_command(run, argv, IMAGE_3_0) in text
    assert IMAGE_3_5 not in text
    assert "- `compile.sh` runs in `%s`, the Vitis AI 3.0 image, whose `vai_c_xir` compiles for DPUCVDX8G." % IMAGE_3_0 \
        in text
    assert "## Inside the Vitis AI 3.0 image: compile.sh alone" in text
    assert "This package cannot run in `%s` (Python 3.7)" % IMAGE_3_0 in text
    # the pipeline is never told to run in the 3.0 image
    assert "--steps compile,deploy` runs it in the" not in text and "python -m pipeline run configs/c.yaml --steps " \
        "compile,deploy\n" not in text


def test_vck190_without_an_xmodel_exports_in_the_pipelines_image_first(tmp_path):
    text, _, _, _ = _plan(tmp_path, "DPUCVDX8G_ISA3_C32B3", exported=False)
    assert "First export `Net_int.xmodel`" in text
    assert "scripts/docker_run.sh configs/c.yaml --set quantizer.backend=nndct --set 'export.formats=[xmodel]' " \
           "--steps calib,test,export" in text


def test_a_family_without_a_known_compile_image_says_so(tmp_path):
    text, script, _, _ = _plan(tmp_path, "DPUCAHX8H_ISA2_DWC")
    assert "- The DPUCAHX8H boards run Vitis AI 2.5. Source: board_setup_alveo.rst@v3.0" in text
    assert "- No Vitis AI image is known to compile for DPUCAHX8H: the commands below use `%s`" % IMAGE_3_5 in text
    assert IMAGE_3_5 in script


def test_a_family_whose_board_release_is_unknown(tmp_path):
    text, _, _, _ = _plan(tmp_path, "DPUCZDI4G_ISA0_B4096_DEMO_SSD")
    assert "- The Vitis AI release of the DPUCZDI4G boards is not known (unknown: only the target_factory" in text


def test_vek280_runs_what_it_compiles_with(tmp_path):
    text, script, _, _ = _plan(tmp_path, "DPUCV2DX8G_ISA1_C20B14")
    assert "- The DPUCV2DX8G boards run Vitis AI 3.5 (board images: VEK280 `amd-vek280-dpu-v2023.1-v3.5.0.img.gz`)" \
        in text
    assert "whose `vai_c_xir` compiles for DPUCV2DX8G." in text and "AMD's own flow" not in text
    assert IMAGE_3_5 in script


@pytest.mark.parametrize("warnings", [None, []])
def test_no_differences_section_without_warnings(tmp_path, warnings):
    text, _, _, _ = _plan(tmp_path, "DPUCZDX8G_ISA1_B4096", warnings=warnings)
    assert "differences between Vitis AI 3.0 and 3.5" not in text


def test_the_plan_lists_the_release_warnings(tmp_path):
    warnings = ["DPUCZDX8G_ISA1_B4096 boards run Vitis AI 3.0: node 'dw2' (nn.Conv2d 'dw2') is a depthwise conv"]
    text, _, _, _ = _plan(tmp_path, "DPUCZDX8G_ISA1_B4096", warnings=warnings)
    assert "- This model meets differences between Vitis AI 3.0 and 3.5 (the export step's warnings):\n  - %s\n" \
        % warnings[0] in text


def test_the_plans_sh_blocks_keep_their_order(tmp_path):
    # the image commands first, then the compile command alone, then its docker command
    text, _, run, argv = _plan(tmp_path, "DPUCZDX8G_ISA1_B4096")
    blocks = [b for b in text.split("```sh\n")[1:]]
    assert blocks[0].startswith("# compile Net_int.xmodel for DPUCZDX8G_ISA1_B4096")
    assert blocks[1].startswith("vai_c_xir -x ")
    assert blocks[2].startswith(plan.docker_command(run, argv))
    assert os.path.basename(run) == "compile"


@pytest.mark.parametrize("installed,expected", [("xcompiler 3.5.0", "3.0"), ("xcompiler 3.0.0", None), (None, None)])
def test_the_compile_step_leaves_a_target_of_another_release_to_its_image(monkeypatch, installed, expected):
    """VCK190 compiles with Vitis AI 3.0's vai_c_xir: a 3.5 compiler here writes the plan for the 3.0 image
    instead of compiling; a 3.0 compiler, or one whose release is unknown, compiles. An MPSoC target
    (compiled in 3.5 by AMD's quickstart, boards on 3.0) compiles with either."""
    from pipeline import targets
    from pipeline.compilers import vai_c
    from pipeline.steps.compile import _other_release
    monkeypatch.setattr(vai_c, "version", lambda: installed)
    target = targets.get_target("DPUCVDX8G_ISA3_C32B3")
    reason = _other_release(target)
    if expected is None:
        assert reason is None
    else:
        cited = "docs/targets.md#releases-and-images"
        assert reason == ("DPUCVDX8G_ISA3_C32B3 compiles with Vitis AI 3.0's vai_c_xir (%s), and this machine's is "
                          "3.5's (xcompiler 3.5.0): compile.sh runs it in xilinx/vitis-ai-pytorch-cpu:ubuntu2004-"
                          "3.0.0.106" % cited)
    assert _other_release(targets.get_target("DPUCZDX8G_ISA1_B4096")) is None  # compiles in 3.5: this compiler
