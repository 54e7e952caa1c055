"""Names checked when they are given (issue 34, item 5): run.name and compile.net_name become folder and
file names and a vai_c_xir argument, so the config refuses, when it is loaded, a name that is not a plain
name (pipeline.specs.NAME_RULE). (The drop-in's output_dir: tests/apis/test_output_dir.py.)

Before: run.name '..' or '.' passed and failed at compile after calib, test and export ran; '-x' reached
`vai_c_xir -n -x` and a deploy/-x folder.
"""
import pytest

from tests.support import make_case

from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.specs import NAME_RULE, is_plain_name

BAD = ["..", ".", "-x", "--help", "a/b", "a b", "", "_hidden", ".x", "x" * 129, "caf\u00e9"]
GOOD = ["digits_sim_zcu102", "a.b-c_1", "9lives", "X", "x" * 128]


@pytest.mark.parametrize("name", BAD)
def test_a_run_name_that_is_not_a_plain_name_is_refused_at_load(tmp_path, name):
    cfg, _ = make_case(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_config(cfg, ["run.name=%s" % name] if name else ["run.name=''"])
    assert "run.name" in str(err.value) and NAME_RULE in str(err.value)


@pytest.mark.parametrize("name", BAD)
def test_a_net_name_that_is_not_a_plain_name_is_refused_at_load(tmp_path, name):
    cfg, _ = make_case(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_config(cfg, ["compile.net_name=%s" % name] if name else ["compile.net_name=''"])
    assert "compile.net_name" in str(err.value) and NAME_RULE in str(err.value)


@pytest.mark.parametrize("name", GOOD)
def test_plain_names_load(tmp_path, name):
    cfg, _ = make_case(tmp_path)
    loaded = load_config(cfg, ["run.name=%s" % name, "compile.net_name=%s" % name])
    assert loaded.cfg.run.name == name and loaded.cfg.compile.net_name == name


def test_the_rule_is_one_rule_for_the_config_the_compiler_and_the_bundle():
    from pipeline.compilers import vai_c
    for name in BAD + GOOD:
        assert vai_c.is_plain_name(name) == is_plain_name(name) == (name in GOOD)
    with pytest.raises(ConfigError, match="compile.net_name: '-x' is not a plain name"):
        vai_c.build_argv("m.xmodel", "arch.json", "out", "-x")


def test_the_rule_is_in_the_schema():
    from pipeline.config import config_schema
    text = str(config_schema())
    assert text.count(NAME_RULE) >= 2
