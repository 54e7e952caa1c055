"""vai_c_xir argv, the compile runner against a fake vai_c_xir on PATH, and the compile plan."""
import json
import os
import shlex
import shutil
import stat
import subprocess

import pytest

from pipeline.compilers import plan, vai_c
from pipeline.errors import BackendUnavailableError, CompileError, ConfigError
from tests.support import REPO
from tests.support import fake_vai_c
from tests.support.fake_vai_c import B4096_ARCH, compiled_xmodel

COMPILED = compiled_xmodel(b"int8 graph", int(B4096_ARCH["fingerprint"], 16))  # the fake's output for the inputs

@pytest.fixture
def fake_compiler(tmp_path, monkeypatch):
    """Put a fake vai_c_xir first on PATH; returns the path of the file where it records its argv."""
    fake_vai_c.install(tmp_path, monkeypatch)
    return tmp_path / "argv.json"


@pytest.fixture
def inputs(tmp_path):
    """A run folder with a quantized xmodel (bytes only) and an arch.json for DPUCZDX8G_ISA1_B4096."""
    run = tmp_path / "run dir"          # a space, to prove no shell splits the paths
    (run / "quantize_result").mkdir(parents=True)
    xmodel = run / "quantize_result" / "MLP_int.xmodel"
    xmodel.write_bytes(b"int8 graph")
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps(B4096_ARCH))
    return str(run), str(xmodel), str(arch)


def test_build_argv_is_the_documented_command():
    argv = vai_c.build_argv("q/MLP_int.xmodel", "/opt/arch.json", "out", "mlp")
    assert argv == ["vai_c_xir", "-x", "q/MLP_int.xmodel", "-a", "/opt/arch.json", "-o", "out", "-n", "mlp"]


def test_build_argv_options_are_one_sorted_json_argument():
    argv = vai_c.build_argv("m.xmodel", "a.json", "o", "n", {"b": 1, "a": "x y"})
    assert argv[-2] == "--options"
    assert argv[-1] == '{"a": "x y", "b": 1}'
    assert json.loads(argv[-1]) == {"a": "x y", "b": 1}


def test_build_argv_is_pure_and_checks_its_arguments(tmp_path):
    before = sorted(os.listdir(str(tmp_path)))
    vai_c.build_argv(str(tmp_path / "none.xmodel"), str(tmp_path / "none.json"), str(tmp_path / "o"), "n")
    assert sorted(os.listdir(str(tmp_path))) == before
    assert vai_c.build_argv("m", "a", "o", "digits.v1-b_2")[-1] == "digits.v1-b_2"
    for bad in ("", "a b", "../x", "x;rm", ".hidden", "a/b"):
        with pytest.raises(ConfigError, match="net_name"):
            vai_c.build_argv("m", "a", "o", bad)
    with pytest.raises(ConfigError, match="xmodel"):
        vai_c.build_argv("", "a", "o", "n")
    with pytest.raises(ConfigError, match="options"):
        vai_c.build_argv("m", "a", "o", "n", ["--x"])


def test_is_available_follows_path(fake_compiler, monkeypatch, tmp_path):
    assert vai_c.is_available()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert not vai_c.is_available()


def test_compile_success_writes_outputs_and_keeps_the_log(fake_compiler, inputs):
    run, xmodel, arch = inputs
    out = os.path.join(run, "compiled")
    result = vai_c.compile_xmodel(xmodel, arch, out, "mlp", target="DPUCZDX8G_ISA1_B4096")
    assert result["xmodel"] == os.path.join(out, "mlp.xmodel")
    assert open(result["xmodel"], "rb").read() == COMPILED
    assert result["returncode"] == 0
    assert result["fingerprint"] == 0x0101000056010407
    assert sorted(os.path.basename(f) for f in result["files"]) == ["meta.json", "mlp.xmodel", "vai_c_xir.log"]
    # the compiler got exactly build_argv's arguments, paths with spaces intact (no shell)
    assert json.load(open(str(fake_compiler))) == vai_c.build_argv(xmodel, arch, out, "mlp")[1:]
    log = open(result["log"]).read()
    assert "returncode: 0" in log and "Compile mode: dpu" in log and json.dumps(result["argv"]) in log


def test_compile_failure_raises_with_argv_code_and_stderr_tail(fake_compiler, inputs, monkeypatch):
    run, xmodel, arch = inputs
    monkeypatch.setenv("FAKE_VAI_C_MODE", "fail")
    out = os.path.join(run, "compiled")
    with pytest.raises(CompileError) as info:
        vai_c.compile_xmodel(xmodel, arch, out, "mlp")
    err = info.value
    assert err.argv == vai_c.build_argv(xmodel, arch, out, "mlp")
    assert err.returncode == 3
    lines = err.stderr_tail.splitlines()
    assert lines == ["error line %d" % i for i in range(10, 30)]
    assert "status 3" in str(err) and "error line 29" in str(err)
    assert "error line 0" in open(os.path.join(out, "vai_c_xir.log")).read()


def test_exit_0_without_compiled_model_is_an_error_even_with_a_stale_file(fake_compiler, inputs, monkeypatch):
    run, xmodel, arch = inputs
    monkeypatch.setenv("FAKE_VAI_C_MODE", "abort")
    out = os.path.join(run, "compiled")
    os.makedirs(out)
    with open(os.path.join(out, "mlp.xmodel"), "wb") as f:
        f.write(b"stale model from an earlier run")
    with pytest.raises(CompileError) as info:
        vai_c.compile_xmodel(xmodel, arch, out, "mlp")
    assert info.value.returncode == 0
    assert "wrote no" in str(info.value) and "aborted" in info.value.stderr_tail
    assert not os.path.exists(os.path.join(out, "mlp.xmodel"))


@pytest.mark.parametrize("mode, got", [
    ("empty", "got an empty file (0 bytes)"),
    ("garbage", "got 8 bytes that do not parse as an XIR graph"),
    ("cpu_only", "got an XIR graph 'compiled' of 1 ops without a DPU subgraph (subgraph devices: CPU)"),
    ("other_dpu", "got an XIR graph whose DPU subgraph is compiled for fingerprint 0x0101000056010408, not the "
                  "target's 0x0101000056010407"),
])
def test_exit_0_with_a_file_that_is_not_a_compiled_model_is_an_error(fake_compiler, inputs, monkeypatch, mode, got):
    # vai_c_xir can exit 0 after an aborted compilation and leave an empty or unfinished <net>.xmodel
    run, xmodel, arch = inputs
    monkeypatch.setenv("FAKE_VAI_C_MODE", mode)
    out = os.path.join(run, "compiled")
    with pytest.raises(CompileError) as info:
        vai_c.compile_xmodel(xmodel, arch, out, "mlp", target="DPUCZDX8G_ISA1_B4096")
    message = str(info.value)
    assert info.value.returncode == 0
    assert ("vai_c_xir exited 0 but its %s is not a compiled model: expected an XIR graph with a DPU subgraph for "
            "this target, %s" % (os.path.join(out, "mlp.xmodel"), got)) in message
    assert "read the compiler's log %s" % os.path.join(out, "vai_c_xir.log") in message
    assert "run the compile step again (--steps compile,deploy)" in message
    # nothing under the name the deploy step takes; the file kept under a name that says it was refused
    assert not os.path.exists(os.path.join(out, "mlp.xmodel"))
    assert os.path.isfile(os.path.join(out, "mlp.xmodel.rejected"))
    assert "The file was kept as %s.rejected; its stderr was empty." % os.path.join(out, "mlp.xmodel") in message
    # a good compile afterwards removes the rejected file
    monkeypatch.setenv("FAKE_VAI_C_MODE", "ok")
    result = vai_c.compile_xmodel(xmodel, arch, out, "mlp", target="DPUCZDX8G_ISA1_B4096")
    assert open(result["xmodel"], "rb").read() == COMPILED
    assert not os.path.exists(os.path.join(out, "mlp.xmodel.rejected"))


def test_the_compiled_check_reads_the_dpu_subgraph():
    from pipeline.compilers import compiled
    assert compiled.problems(COMPILED, 0x0101000056010407) == (
        None, {"graph": "compiled", "ops": 1, "dpu_subgraphs": ["subgraph_input"]})
    assert compiled.problems(compiled_xmodel(b"x"), 0x0101000056010407)[0] is None  # no fingerprint named: not compared
    truncated = COMPILED[:-3]
    assert compiled.problems(truncated)[0].startswith("%d bytes that do not parse as an XIR graph (not an XIR graph "
                                                      "(serial_v2.Graph): Error parsing message" % len(truncated))


def test_timeout_is_a_compile_error(fake_compiler, inputs, monkeypatch):
    run, xmodel, arch = inputs
    monkeypatch.setenv("FAKE_VAI_C_MODE", "sleep")
    with pytest.raises(CompileError) as info:
        vai_c.compile_xmodel(xmodel, arch, os.path.join(run, "c"), "mlp", timeout_s=1)
    assert info.value.returncode is None and "did not finish" in str(info.value)


def test_p11_wrong_arch_json_stops_before_the_compiler_runs(fake_compiler, inputs, tmp_path):
    run, xmodel, _ = inputs
    arch = tmp_path / "arch_25.json"
    arch.write_text(json.dumps({"fingerprint": "0x101000016010407"}))
    with pytest.raises(ConfigError) as info:
        vai_c.compile_xmodel(xmodel, str(arch), os.path.join(run, "c"), "mlp", target="DPUCZDX8G_ISA1_B4096")
    assert "0x0101000016010407" in str(info.value) and "0x0101000056010407" in str(info.value)
    assert not os.path.exists(str(fake_compiler)), "the compiler must not have run"


def test_missing_compiler_and_missing_xmodel(inputs, monkeypatch, tmp_path, fake_compiler):
    run, xmodel, arch = inputs
    with pytest.raises(ConfigError, match="does not exist"):
        vai_c.compile_xmodel(os.path.join(run, "nope.xmodel"), arch, run, "mlp")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BackendUnavailableError, match="Vitis AI image"):
        vai_c.compile_xmodel(xmodel, arch, run, "mlp")


def test_version_is_none_or_names_the_package():
    v = vai_c.version()
    assert v is None or v.split()[0] in vai_c.COMPILER_DISTRIBUTIONS


def test_compile_plan_writes_the_exact_command_and_says_why(inputs, tmp_path):
    run, xmodel, _ = inputs
    arch = "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json"
    argv = vai_c.build_argv(xmodel, arch, os.path.join(run, "compiled"), "mlp")
    files = plan.write_compile_plan(run, argv, "DPUCZDX8G_ISA1_B4096", "vai_c_xir is not on PATH.",
                                    config_path="configs/mlp.yaml")
    path = files["plan"]
    assert files == {"plan": os.path.join(run, "compile_plan.md"), "script": os.path.join(run, "compile.sh")}
    script = open(os.path.join(run, "compile.sh")).read()
    expected = "vai_c_xir -x quantize_result/MLP_int.xmodel -a %s -o compiled -n mlp" % arch
    lines = script.splitlines()
    # the script compiles the xmodel next to it when there is one (the deploy bundle's copy)
    assert lines[-3:] == ["xmodel=quantize_result/MLP_int.xmodel",
                          "if [ -f MLP_int.xmodel ]; then xmodel=MLP_int.xmodel; fi  # the copy in the deploy bundle",
                          'vai_c_xir -x "$xmodel" -a %s -o compiled -n mlp' % arch]
    assert os.stat(os.path.join(run, "compile.sh")).st_mode & stat.S_IXUSR
    text = open(path).read()
    assert "The compiler did not run here.** vai_c_xir is not on PATH." in text
    assert expected in text and "0x0101000056010407" in text and "0x0101000016010407" in text
    assert "scripts/docker_run.sh configs/mlp.yaml" in text
    # the xmodel is in place: the plan says so and asks only for the compile step
    assert "**`MLP_int.xmodel`** (`quantize_result/MLP_int.xmodel`, from the folder of this plan). It is there" in text
    assert "--steps calib,test,export" not in text and "--steps compile,deploy" in text
    docker = plan.docker_command(run, argv)
    assert docker in text
    # the folder of compile.sh is mounted where it is, named by the shell: no path of it in the command;
    # the arch.json inside the image is not mounted
    assert '-v "$(pwd)":"$(pwd)" -w "$(pwd)" ' in docker and os.path.abspath(run) not in docker
    assert "/opt/vitis_ai" not in docker.split(" bash -c ")[0]
    assert not [n for n in os.listdir(run) if n.startswith(".")], "temporary files left behind"


def test_compile_plan_into_the_compiler_output_folder(tmp_path):
    run = str(tmp_path / "compile")
    argv = vai_c.build_argv(str(tmp_path / "export" / "M_int.xmodel"), "/opt/a/arch.json", run, "m")
    plan.write_compile_plan(run, argv, "DPUCZDX8G_ISA1_B4096", "r")
    lines = open(os.path.join(run, "compile.sh")).read().splitlines()
    assert lines[-3] == "xmodel=%s" % shlex.quote(str(tmp_path / "export" / "M_int.xmodel"))
    assert lines[-1] == 'vai_c_xir -x "$xmodel" -a /opt/a/arch.json -o . -n m'
    assert not [line for line in lines if line.startswith("mkdir")]


@pytest.mark.parametrize("bundled", [False, True])
def test_compile_script_compiles_the_exported_xmodel_or_the_bundles_copy(tmp_path, bundled):
    """compile.sh run as the image runs it (a stand-in vai_c_xir on PATH records its argv): the exported
    xmodel, or, in a deploy bundle that carries one next to the script, that copy."""
    export = tmp_path / "run" / "export"
    export.mkdir(parents=True)
    (export / "M_int.xmodel").write_bytes(b"exported")
    run = str(tmp_path / "run" / "compile")
    plan.write_compile_plan(run, vai_c.build_argv(str(export / "M_int.xmodel"), "/opt/a/arch.json", run, "m"),
                            "DPUCZDX8G_ISA1_B4096", "r")
    folder = run
    if bundled:  # the deploy step copies compile.sh next to the quantized xmodel
        folder = str(tmp_path / "bundle")
        os.makedirs(folder)
        shutil.copy2(os.path.join(run, "compile.sh"), folder)
        with open(os.path.join(folder, "M_int.xmodel"), "wb") as f:
            f.write(b"bundled")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vai_c_xir"
    fake.write_text('#!/bin/sh\ncat "$2" > "%s"\n' % (tmp_path / "compiled_from"))
    fake.chmod(0o755)
    env = dict(os.environ, PATH=str(bin_dir) + os.pathsep + os.environ["PATH"])
    subprocess.run(["sh", os.path.join(folder, "compile.sh")], env=env, check=True)
    assert (tmp_path / "compiled_from").read_bytes() == (b"bundled" if bundled else b"exported")


def test_docker_command_mounts_every_folder_the_command_reads(tmp_path):
    run = str(tmp_path / "run" / "compile")
    argv = vai_c.build_argv(str(tmp_path / "run" / "export" / "M_int.xmodel"), str(tmp_path / "arch" / "a.json"),
                            run, "m")
    cmd = plan.docker_command(run, argv)  # the compile folder alone travels: what lies outside it is mounted
    assert '-v "$(pwd)":"$(pwd)" ' in cmd and '-w "$(pwd)" ' in cmd
    for folder in (str(tmp_path / "run" / "export"), str(tmp_path / "arch")):
        assert "-v %s:%s " % (folder, folder) in cmd
    # the run folder travels: it is mounted from the folder of compile.sh, the arch.json outside it by its path
    cmd = plan.docker_command(run, argv, root=str(tmp_path / "run"))
    assert '-v "$(cd .. && pwd)":"$(cd .. && pwd)" ' in cmd and '-w "$(pwd)" ' in cmd
    assert str(tmp_path / "run") not in cmd and "-v %s:%s " % (tmp_path / "arch", tmp_path / "arch") in cmd
    nested = vai_c.build_argv(os.path.join(run, "q", "M_int.xmodel"), "/opt/vitis_ai/compiler/arch/x/arch.json", run, "m")
    assert plan.docker_command(run, nested).count(" -v ") == 1


def test_compile_plan_script_runs_the_compiler_from_any_folder(inputs, fake_compiler, tmp_path):
    run, xmodel, arch = inputs
    argv = vai_c.build_argv(xmodel, arch, os.path.join(run, "compiled"), "mlp")
    plan.write_compile_plan(run, argv, "DPUCZDX8G_ISA1_B4096", "test")
    subprocess.run(["sh", os.path.join(run, "compile.sh")], check=True, cwd=str(tmp_path),
                   stdout=subprocess.DEVNULL)
    assert open(os.path.join(run, "compiled", "mlp.xmodel"), "rb").read() == COMPILED
    assert json.load(open(str(fake_compiler))) == ["-x", "quantize_result/MLP_int.xmodel", "-a", arch,
                                                   "-o", "compiled", "-n", "mlp"]


def _compile_sh_header(script):
    """``{"-x": (path, note), ...}`` from the comment lines compile.sh writes about its paths."""
    notes = {}
    for line in script.splitlines():
        if line.startswith("# -"):
            flag_path, note = line[2:].split(": ", 1)
            flag, path = flag_path.split(" ", 1)
            notes[flag] = (path, note)
    return notes


def test_compile_sh_says_truly_which_paths_are_relative(tmp_path):
    # the runner's layout: <run>/compile next to <run>/export; an arch.json elsewhere on the host
    run = str(tmp_path / "run" / "compile")
    xmodel = str(tmp_path / "run" / "export" / "DigitsCNN_int.xmodel")
    arch = str(tmp_path / "boards" / "arch.json")
    argv = vai_c.build_argv(xmodel, arch, os.path.join(run, "out"), "digits")
    plan.write_compile_plan(run, argv, "DPUCZDX8G_ISA1_B4096", "r")
    script = open(os.path.join(run, "compile.sh")).read()
    assert "paths are relative to this folder" not in script
    notes = _compile_sh_header(script)
    assert notes["-x"] == (xmodel, "an absolute path on the machine that wrote this file")
    assert notes["-a"] == (arch, "an absolute path on the machine that wrote this file")
    assert notes["-o"] == ("out", "relative to the folder of compile.sh (it changes there first)")
    image = vai_c.build_argv(xmodel, "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json", run, "digits")
    plan.write_compile_plan(run, image, "DPUCZDX8G_ISA1_B4096", "r")
    notes = _compile_sh_header(open(os.path.join(run, "compile.sh")).read())
    assert notes["-a"] == ("/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json", "a path inside the Vitis AI image")
    assert notes["-o"][0] == "."


def test_compile_sh_copied_elsewhere_still_finds_the_xmodel(inputs, fake_compiler, tmp_path):
    # the deploy bundle carries a copy of compile.sh: the xmodel, outside the compile folder (the runner's
    # layout), is named by its absolute path, and the output folder is the script's own
    _, xmodel, arch = inputs
    run = str(tmp_path / "run dir" / "compile")
    plan.write_compile_plan(run, vai_c.build_argv(xmodel, arch, run, "mlp"), "DPUCZDX8G_ISA1_B4096", "r")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    with open(os.path.join(run, "compile.sh")) as f:
        (bundle / "compile.sh").write_text(f.read())
    subprocess.run(["sh", str(bundle / "compile.sh")], check=True, cwd=str(tmp_path), stdout=subprocess.DEVNULL)
    assert (bundle / "mlp.xmodel").read_bytes() == COMPILED


def _sh_blocks(text):
    blocks, inside = [], None
    for line in text.splitlines():
        if line == "```sh":
            inside = []
        elif line == "```" and inside is not None:
            blocks.append(inside)
            inside = None
        elif inside is not None:
            inside.append(line)
    return blocks


def test_plan_after_the_sim_backend_names_the_missing_xmodel_and_the_two_image_commands(tmp_path):
    # what step_compile hands over after a sim run: the real class name, no xmodel on disk
    run = str(tmp_path / "run" / "compile")
    xmodel = str(tmp_path / "run" / "export" / "DigitsCNN_int.xmodel")
    argv = vai_c.build_argv(xmodel, "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json", run, "digits")
    assert plan.expected_xmodel(argv) == ("DigitsCNN_int.xmodel", "DigitsCNN")
    text = open(plan.write_compile_plan(run, argv, "DPUCZDX8G_ISA1_B4096", "vai_c_xir is not installed here.",
                                        config_path="configs/digits_sim_zcu102.yaml")["plan"]).read()
    assert "**`DigitsCNN_int.xmodel`** (`%s`). **It does not exist yet.**" % xmodel in text
    assert "`nndct` backend" in text and "`export_xmodel()`" in text and "inside the Vitis AI image" in text
    commands = [line for line in _sh_blocks(text)[0] if not line.startswith("#")]
    assert len(commands) == 2
    # 1. export with the nndct backend, 2. compile: both valid for the CLI and the config
    from pipeline.cli import build_parser
    from pipeline.config import load_config
    parsed = [build_parser().parse_args(shlex.split(c)[3:]) for c in commands]
    assert [p.command for p in parsed] == ["run", "run"]
    assert parsed[0].steps == ["calib", "test", "export"] and parsed[1].steps == ["compile", "deploy"]
    for p in parsed:
        assert p.config_pos == "configs/digits_sim_zcu102.yaml" and p.config is None  # positional CONFIG
        cfg = load_config(os.path.join(REPO, p.config_pos), p.overrides).cfg
        assert cfg.quantizer.backend == "nndct" and cfg.export.formats == ["xmodel"]
    # the compile command alone, and the docker command that runs it once the xmodel exists
    assert "vai_c_xir -x %s -a %s -o . -n digits" % (xmodel, argv[4]) in _sh_blocks(text)[1]
    assert plan.docker_command(run, argv) in text
    assert "Once `DigitsCNN_int.xmodel` exists" in text


def test_plan_with_a_placeholder_xmodel_explains_the_class_name(tmp_path):
    run = str(tmp_path / "compile")
    argv = vai_c.build_argv(str(tmp_path / "export" / "<Model>_int.xmodel"), "/opt/vitis_ai/a/arch.json", run, "m")
    assert plan.expected_xmodel(argv) == ("<Model>_int.xmodel", None)
    text = open(plan.write_compile_plan(run, argv, "DPUCZDX8G_ISA1_B4096", "r")["plan"]).read()
    assert "**`<ModelClass>_int.xmodel`**, where `<ModelClass>` is the class name of the float model" in text
    assert "python -m pipeline run CONFIG.yaml" in text and "--steps calib,test,export" in text


def test_with_the_run_folder_as_root_the_plan_names_no_path_of_it_and_a_moved_copy_compiles(tmp_path):
    """Issue 34, item 4: compile.sh and compile_plan.md write the paths inside the run folder relative to the
    compile folder, and the docker command mounts the run folder from there, so a moved or copied run
    folder compiles as it is."""
    run = tmp_path / "run"
    (run / "export").mkdir(parents=True)
    (run / "export" / "M_int.xmodel").write_bytes(b"exported")
    compile_dir = str(run / "compile")
    argv = vai_c.build_argv(str(run / "export" / "M_int.xmodel"), "/opt/vitis_ai/a/arch.json", compile_dir, "m")
    files = plan.write_compile_plan(compile_dir, argv, "DPUCZDX8G_ISA1_B4096", "r", root=str(run))
    for path in files.values():
        with open(path) as f:
            assert str(run) not in f.read(), path
    notes = _compile_sh_header(open(files["script"]).read())
    assert notes["-x"] == ("../export/M_int.xmodel", "relative to the folder of compile.sh (it changes there first)")
    text = open(files["plan"]).read()
    assert "**`M_int.xmodel`** (`../export/M_int.xmodel`, from the folder of this plan). It is there" in text
    assert plan.docker_command(compile_dir, argv, root=str(run)) in text
    moved = tmp_path / "elsewhere" / "moved"
    shutil.copytree(str(run), str(moved))
    shutil.rmtree(str(run))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vai_c_xir").write_text('#!/bin/sh\ncat "$2" > "%s"\n' % (tmp_path / "compiled_from"))
    (bin_dir / "vai_c_xir").chmod(0o755)
    env = dict(os.environ, PATH=str(bin_dir) + os.pathsep + os.environ["PATH"])
    subprocess.run(["sh", str(moved / "compile" / "compile.sh")], env=env, check=True, cwd=str(tmp_path))
    assert (tmp_path / "compiled_from").read_bytes() == b"exported"


def test_a_config_path_that_looks_like_an_option_is_written_as_a_path(tmp_path):
    run = str(tmp_path / "compile")
    argv = vai_c.build_argv(str(tmp_path / "export" / "M_int.xmodel"), "/opt/vitis_ai/a/arch.json", run, "m")
    text = open(plan.write_compile_plan(run, argv, "DPUCZDX8G_ISA1_B4096", "r", config_path="-x.yaml")["plan"]).read()
    assert "python -m pipeline run ./-x.yaml" in text and "run -x.yaml" not in text


def test_the_plan_says_a_model_factory_must_be_importable(tmp_path, monkeypatch):
    # python -m pipeline run imports model.factory's module: the plan's commands need it on PYTHONPATH
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "mymodel_plan_case.py").write_text("def build():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "proj"))
    run = str(tmp_path / "compile")
    argv = vai_c.build_argv(str(tmp_path / "export" / "M_int.xmodel"), "/opt/vitis_ai/a/arch.json", run, "m")
    text = open(plan.write_compile_plan(run, argv, "DPUCZDX8G_ISA1_B4096", "r", config_path="my.yaml",
                                        factory="mymodel_plan_case:build")["plan"]).read()
    assert ("This config builds its model with `model.factory: mymodel_plan_case:build`: each `python -m pipeline "
            "run` above imports `mymodel_plan_case`, so run it where Python finds that module: from the folder that "
            "holds it, or with `PYTHONPATH=<that folder>` in front of the command (on this machine: `%s`)."
            % (tmp_path / "proj")) in text
    assert plan.factory_lines(None) == []
    assert plan.factory_lines("not_a_module_anywhere:build")[1].endswith("in front of the command.")
    plain = open(plan.write_compile_plan(run, argv, "DPUCZDX8G_ISA1_B4096", "r", config_path="my.yaml")["plan"]).read()
    assert "model.factory" not in plain
