"""Config loading: strict keys with dotted paths and closest matches, overrides, path resolution."""
import os
import re

import pytest
import yaml

from pipeline.config import apply_overrides, config_schema, load_config, parse_override
from pipeline.errors import ConfigError

BASE = {
    "run": {"name": "t"},
    "data": {"source": {"type": "digits"}},
    "preprocess": {"mean": [78.0], "std": [96.0]},
    "model": {"zoo": "digits_cnn"},
}


def write(tmp_path, raw, name="c.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(raw))
    return str(p)


def test_minimal_config_gets_defaults(tmp_path):
    loaded = load_config(write(tmp_path, BASE))
    assert loaded.cfg.quantizer.backend == "sim"
    assert loaded.cfg.quantizer.bitwidth == 8
    assert loaded.cfg.compile.target == "DPUCZDX8G_ISA1_B4096"
    assert loaded.work_dir == os.path.abspath(os.path.join("runs", "t"))


def test_misspelt_key_names_dotted_path_allowed_keys_and_closest_match(tmp_path):
    raw = dict(BASE, data={"source": {"type": "digits"}, "calib_batchs": 4})
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, raw))
    msg = str(err.value)
    assert "data.calib_batchs: unknown key" in msg
    assert "calib_batches" in msg and "batch_size" in msg
    assert "did you mean 'calib_batches'?" in msg


def test_every_problem_is_reported_at_once(tmp_path):
    raw = dict(BASE, quantizer={"bitwdth": 8, "backend": "tensorrt"})
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, raw))
    msg = str(err.value)
    assert "quantizer.bitwdth: unknown key" in msg and "did you mean 'bitwidth'?" in msg
    assert "quantizer.backend" in msg and "tensorrt" in msg


def test_wrong_type_and_missing_section(tmp_path):
    raw = dict(BASE, data={"source": {"type": "digits"}, "batch_size": "many"})
    del raw["model"]
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, raw))
    assert "data.batch_size" in str(err.value) and "'many'" in str(err.value)
    assert "model: required key is missing" in str(err.value)


def test_model_needs_exactly_one_of_zoo_or_factory(tmp_path):
    raw = dict(BASE, model={"zoo": "digits_cnn", "factory": "a.b:c"})
    with pytest.raises(ConfigError, match="exactly one of 'zoo' or 'factory'"):
        load_config(write(tmp_path, raw))


def test_mean_std_lengths_must_agree(tmp_path):
    raw = dict(BASE, preprocess={"mean": [1, 2, 3], "std": [1]})
    with pytest.raises(ConfigError, match="mean has 3 values but std has 1"):
        load_config(write(tmp_path, raw))


def test_missing_input_file_is_reported_with_its_resolved_path(tmp_path):
    raw = dict(BASE, model={"zoo": "digits_cnn", "weights": "w/missing.pt"})
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, raw))
    assert "model.weights" in str(err.value)
    assert str(tmp_path / "w" / "missing.pt") in str(err.value)


def test_overrides_parse_yaml_scalars_and_create_sections():
    assert parse_override("data.batch_size=16") == (["data", "batch_size"], 16)
    assert parse_override("run.work_dir=/tmp/x") == (["run", "work_dir"], "/tmp/x")
    assert parse_override("preprocess.mean=[1, 2]") == (["preprocess", "mean"], [1, 2])
    out = apply_overrides(BASE, ["quantizer.bitwidth=4", "export.formats=[onnx_exact]"])
    assert out["quantizer"] == {"bitwidth": 4}
    assert out["export"] == {"formats": ["onnx_exact"]}
    assert "quantizer" not in BASE  # the input dict is not modified


def test_override_of_unknown_key_is_caught_like_a_file_key(tmp_path):
    with pytest.raises(ConfigError, match="run.wrk_dir: unknown key.*did you mean 'work_dir'"):
        load_config(write(tmp_path, BASE), ["run.wrk_dir=/tmp/x"])


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="dotted.path=value"):
        parse_override("run.work_dir")
    with pytest.raises(ConfigError, match="is a int, not a section"):
        apply_overrides({"data": {"batch_size": 3}}, ["data.batch_size.x=1"])


def test_relative_input_paths_resolve_against_the_yaml_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.pt").write_bytes(b"")
    raw = dict(BASE, model={"zoo": "digits_cnn", "weights": "w.pt"},
               data={"source": {"type": "npy", "path": "x.npy"}})
    loaded = load_config(write(tmp_path / "sub", raw))
    assert loaded.resolve(loaded.cfg.model.weights) == str(tmp_path / "sub" / "w.pt")
    absolute = loaded.absolute_raw()
    assert absolute["model"]["weights"] == str(tmp_path / "sub" / "w.pt")
    assert absolute["data"]["source"]["path"] == str(tmp_path / "sub" / "x.npy")


def test_config_hash_ignores_work_dir_but_not_values(tmp_path):
    p = write(tmp_path, BASE)
    a = load_config(p, ["run.work_dir=/tmp/a"]).hash()
    assert a == load_config(p, ["run.work_dir=/tmp/b"]).hash()
    assert a != load_config(p, ["data.batch_size=7"]).hash()


def test_yaml_is_loaded_safely(tmp_path):
    p = tmp_path / "evil.yaml"
    p.write_text("run: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(p))


def test_schema_lists_sections_and_descriptions():
    schema = config_schema()
    assert set(schema["properties"]) == {"run", "data", "preprocess", "model", "quantizer", "export", "compile"}
    assert schema["additionalProperties"] is False


def test_unknown_compile_target_is_rejected_with_closest_match(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, BASE), ["compile.target=DPUCZDX8G_ISA1_B4069"])
    assert "compile.target: expected a DPU target name of Vitis AI 3.x, got 'DPUCZDX8G_ISA1_B4069'" in str(err.value)
    assert "closest: DPUCZDX8G_ISA1_B4096," in str(err.value)


def test_export_formats_default_per_backend_and_are_checked(tmp_path):
    p = write(tmp_path, BASE)
    assert load_config(p).cfg.export.formats == ["onnx_exact", "onnx_qdq", "xmodel"]
    assert load_config(p, ["quantizer.backend=nndct"]).cfg.export.formats == ["xmodel"]
    assert load_config(p, ["export.formats=[xmodel]"]).cfg.export.formats == ["xmodel"]
    with pytest.raises(ConfigError, match=r"export.formats: the sim backend cannot write \['torchscript'\]"):
        load_config(p, ["export.formats=[torchscript]"])


def test_a_key_written_twice_is_refused_with_both_lines(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("run:\n  name: x\nquantizer:\n  max_accuracy_drop: 1.0\n  max_accuracy_drop: 50\n")
    with pytest.raises(ConfigError, match="'max_accuracy_drop' is written twice.*line 4.*line 5"):
        load_config(str(p))


def test_a_folder_where_a_file_is_expected_is_named_so(tmp_path):
    raw = dict(BASE, model={"zoo": "digits_cnn", "weights": "weights_dir"})
    (tmp_path / "weights_dir").mkdir()
    with pytest.raises(ConfigError, match="model.weights: .*weights_dir is a folder, not a file"):
        load_config(write(tmp_path, raw))
    with pytest.raises(ConfigError, match="config file .* is a folder, not a file"):
        load_config(str(tmp_path))


@pytest.mark.parametrize("override,expected", [
    ("run.seed=-1", "run.seed: Input should be greater than or equal to 0"),
    ("run.seed=4294967296", "run.seed: Input should be less than or equal to 4294967295"),
    ("run.num_threads=100000", "run.num_threads: Input should be less than or equal to 1024"),
    ("model.train.lr=.inf", "model.train.lr: Input should be a finite number"),
    ("model.train.lr=.nan", "model.train.lr: Input should be a finite number"),
    ("model.train.weight_decay=.inf", "model.train.weight_decay: Input should be a finite number"),
])
def test_numbers_outside_their_range_are_refused_by_name(tmp_path, override, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(write(tmp_path, BASE), [override])


def test_the_dpu_target_is_resolved_once_by_the_config(tmp_path):
    from pipeline.targets import TARGETS
    loaded = load_config(write(tmp_path, BASE))
    assert loaded.target is TARGETS["DPUCZDX8G_ISA1_B4096"]
    assert loaded.quantizer_target is None  # quantizer.target null: no hardware-aware mode
    assert loaded.arch_json() == "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json"
    raw = dict(BASE, quantizer={"target": "DPUCV2DX8G_ISA1_C20B14"},
               compile={"target": "DPUCV2DX8G_ISA1_C20B14", "board": "VEK280"})
    loaded = load_config(write(tmp_path, raw))
    assert loaded.target is TARGETS["DPUCV2DX8G_ISA1_C20B14"]
    assert loaded.quantizer_target == "DPUCV2DX8G_ISA1_C20B14"
    assert loaded.arch_json() == "/opt/vitis_ai/compiler/arch/DPUCV2DX8G/VEK280/arch.json"


def test_only_the_config_reads_the_target_keys():
    # every consumer reads LoadedConfig.target (and quantizer_target, arch_json()): the YAML keys
    # compile.target and quantizer.target are read and resolved in pipeline/config/ alone
    read = re.compile(r"\bcfg\.(compile|quantizer)\.target\b|\b[cq]\.target\b")
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pipeline")
    hits = []
    for folder, _, files in os.walk(root):
        if os.path.relpath(folder, root).split(os.sep)[0] == "config":
            continue
        for name in (n for n in files if n.endswith(".py")):
            with open(os.path.join(folder, name)) as f:
                hits += ["%s/%s:%d" % (folder, name, n) for n, line in enumerate(f, 1) if read.search(line)]
    assert hits == []


def test_a_leading_tilde_in_a_path_is_the_home_folder(tmp_path, monkeypatch):
    # --set run.work_dir=~/x wrote into a folder named "~" under the current one while the output said ~/x
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "data" / "w.pt").write_bytes(b"")
    (home / "arch.json").write_text('{"fingerprint": "0x101000056010407"}')
    monkeypatch.setenv("HOME", str(home))
    loaded = load_config(write(tmp_path, BASE), ["run.work_dir=~/runs/x", "model.weights=~/data/w.pt",
                                                 "compile.arch_json=~/arch.json"])
    assert loaded.work_dir == str(home / "runs" / "x")
    assert loaded.raw["model"]["weights"] == str(home / "data" / "w.pt")
    assert loaded.arch_json() == str(home / "arch.json")
    assert loaded.absolute_raw()["run"]["work_dir"] == str(home / "runs" / "x")
    raw = {"run": {"work_dir": "a~b"}, "data": {"source": {"type": "npy", "path": "~/i.npy", "labels": "l~.npy"}}}
    from pipeline.config.loading import expand_home
    assert expand_home(raw) == {"run": {"work_dir": "a~b"},
                                "data": {"source": {"type": "npy", "path": str(home / "i.npy"), "labels": "l~.npy"}}}
