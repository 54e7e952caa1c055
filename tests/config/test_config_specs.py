"""data.source and preprocess.stages: models generated from the registries, in the JSON Schema and
checked by load_config with dotted paths."""
import dataclasses

import pytest
import yaml

from pipeline.config import config_schema, load_config
from pipeline.data.base import SOURCE_FIELDS
from pipeline.data.sources import SOURCES
from pipeline.errors import ConfigError
from pipeline.stages.registry import STAGES

BASE = {
    "run": {"name": "t"},
    "data": {"source": {"type": "digits"}},
    "preprocess": {"stages": [{"type": "layout", "src": "NHWC", "dst": "NCHW"}], "mean": [0.0], "std": [1.0]},
    "model": {"zoo": "digits_cnn"},
}


def _write(tmp_path, raw):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_schema_has_every_stage_with_its_dataclass_fields():
    schema = config_schema()
    stages = schema["$defs"]["PreprocessSection"]["properties"]["stages"]["items"]
    assert set(stages["discriminator"]["mapping"]) == set(STAGES)
    for name, cls in STAGES.items():
        entry = schema["$defs"]["stage_" + name]
        fields = dataclasses.fields(cls)
        assert set(entry["properties"]) == {"type"} | {f.name for f in fields}, name
        required = {f.name for f in fields if f.default is dataclasses.MISSING}
        assert set(entry.get("required", [])) == {"type"} | required, name
        assert entry["additionalProperties"] is False and entry["properties"]["type"]["const"] == name


def test_schema_has_every_source_with_its_keys():
    schema = config_schema()
    source = schema["$defs"]["DataSection"]["properties"]["source"]
    assert set(source["discriminator"]["mapping"]) == set(SOURCES) == set(SOURCE_FIELDS)
    for name, fields in SOURCE_FIELDS.items():
        entry = schema["$defs"]["source_" + name]
        assert set(entry["properties"]) == {"type"} | set(fields), name
        assert set(entry.get("required", [])) == {"type"} | {k for k, (_, d) in fields.items() if d is ...}
    assert sorted(schema["$defs"]["source_npy"]["properties"]["layout"]["enum"]) == ["NCHW", "NHWC"]


def test_load_config_names_every_bad_source_and_stage_key(tmp_path):
    raw = dict(BASE, data={"source": {"type": "npy", "pth": "x.npy"}},
               preprocess=dict(BASE["preprocess"], stages=[
                   {"type": "layout", "src": "NHWC", "dst": "NCHW"},
                   {"type": "center_corp", "height": 4, "width": 4},
                   {"type": "crop", "top": 0, "left": 0, "height": "8", "widht": 2}]))
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, raw))
    message = str(err.value)
    for line in ["data.source.pth: unknown key; allowed keys: class_names, color, labels, layout, path, type; "
                 "did you mean 'path'?",
                 "data.source.path: required key is missing",
                 "preprocess.stages[1]: unknown type 'center_corp'", "did you mean 'center_crop'?",
                 "preprocess.stages[2].height: Input should be a valid integer (got '8')",
                 "preprocess.stages[2].widht: unknown key", "did you mean 'width'?",
                 "preprocess.stages[2].width: required key is missing"]:
        assert line in message, line
    assert "stages[0]" not in message


def test_a_good_config_loads_and_keeps_its_specs_as_dicts(tmp_path):
    loaded = load_config(_write(tmp_path, BASE))
    assert loaded.cfg.data.source == {"type": "digits"}
    assert loaded.cfg.preprocess.stages == [{"type": "layout", "src": "NHWC", "dst": "NCHW"}]


@pytest.mark.parametrize("mean, std", [([1.0, 2.0], [1.0]), ([1.0], [0.0]), ([float("nan")], [1.0]), ("abc", [1.0])])
def test_mean_and_std_are_checked_by_one_function_everywhere(tmp_path, mean, std):
    """The config and the quantizer boundary (a public constructor) give the same message
    (specs.check_mean_std); the deploy bundle takes the boundary's checked spec() and checks nothing again."""
    from pipeline.boundary import QuantizerBoundary
    from pipeline.specs import check_mean_std
    with pytest.raises(ConfigError) as expected:
        check_mean_std(mean, std)
    with pytest.raises(ConfigError) as boundary:
        QuantizerBoundary(mean, std)
    assert str(boundary.value) == str(expected.value)
    if isinstance(mean, list):  # YAML can say it
        with pytest.raises(ConfigError) as config:
            load_config(_write(tmp_path, dict(BASE, preprocess=dict(BASE["preprocess"], mean=mean, std=std))))
        assert str(expected.value) in str(config.value)
