"""Hostile values and files get one clear error, never a traceback or a silent change (issue 25):
deeply nested JSON, .npz members larger than memory, 16-bit images, non-JSON compiler options,
YAML's 1e-45, a mean/std that overflows float32, an unsupported bit width on many nodes."""
import json
import os

import numpy as np
import pytest

from pipeline.errors import ConfigError, QuantizationError

DEEP = "[" * 100000 + "]" * 100000  # RecursionError in Python's json decoder


# ---------------------------------------------------------------------------- JSON nesting

def test_a_deeply_nested_quant_config_file_is_a_config_error(tmp_path):
    from pipeline.quantizers.quant_config import load_quant_config
    path = tmp_path / "qc.json"
    path.write_text(DEEP)
    with pytest.raises(ConfigError, match=r"qc.json is not valid JSON: arrays/objects nested more than 64 levels "
                                          r"deep \(line 1, column 65\)"):
        load_quant_config(str(path))


def test_a_deeply_nested_quant_info_is_a_quantization_error(tmp_path):
    from pipeline.quantizers.quant_info import read_quant_info
    (tmp_path / "quant_info.json").write_text('{"param": ' + DEEP + "}")
    with pytest.raises(QuantizationError, match=r"quant_info.json is not valid JSON \(arrays/objects nested more "
                                                r"than 64 levels deep \(line 1, column 74\)"):
        read_quant_info(str(tmp_path))


def test_every_json_reader_is_bounded_in_depth(tmp_path):
    from pipeline import fileio
    from pipeline.errors import FingerprintMismatchError
    from pipeline.quantizers.fingerprint import read_fingerprint
    from pipeline.targets.arch_json import read_arch_json
    path = tmp_path / "deep.json"
    path.write_text(DEEP)
    with pytest.raises(fileio.JSONDepthError, match="nested more than 64 levels"):
        fileio.read_json(str(path))
    (tmp_path / "calib_fingerprint.json").write_text(DEEP)
    with pytest.raises(FingerprintMismatchError, match="nested more than 64 levels"):
        read_fingerprint(str(tmp_path))
    with pytest.raises(ConfigError, match="nested more than 64 levels"):
        read_arch_json(str(path))


def test_brackets_inside_strings_do_not_count_and_shallow_json_reads_as_before():
    from pipeline.fileio import parse_json
    text = json.dumps({"a": ["[" * 200, {"b": "\\\"{" * 100}], "c": [[[[1]]]]})
    assert parse_json(text) == json.loads(text)
    assert parse_json("[" * 64 + "]" * 64) == json.loads("[" * 64 + "]" * 64)


# ---------------------------------------------------------------------------- config values

@pytest.fixture
def case(tmp_path):
    from tests.support import make_case
    cfg, _ = make_case(tmp_path)
    return cfg


@pytest.mark.parametrize("override, match", [
    ("compile.options={a: {b: [1, .nan]}}", r"compile.options.a.b\[1\] is nan, which JSON cannot hold \(it would be "
                                            r"written as NaN\)"),
    ("compile.options={x: -.inf}", r"compile.options.x is -inf, .*written as -Infinity"),
    ("compile.options={built: 2024-01-01}", r"compile.options.built is datetime.date\(2024, 1, 1\) \(a date\), which "
                                            r"JSON has no type for"),
])
def test_compile_options_that_are_not_json_are_refused_at_load_naming_the_key(case, override, match):
    import pipeline
    with pytest.raises(ConfigError, match=match):
        pipeline.load_config(case, [override])


def test_json_compile_options_still_load(case):
    import pipeline
    cfg = pipeline.load_config(case, ["compile.options={mode: debug, n: [1, 2.5, true, null]}"])
    assert cfg.cfg.compile.options == {"mode": "debug", "n": [1, 2.5, True, None]}


@pytest.mark.parametrize("override, match", [
    ("preprocess.std=[1e-45]", r"preprocess.std\[0\]: Input should be a valid number \(got '1e-45'\); YAML reads "
                               r"1e-45 as text: write 1.0e-45"),
    ("model.train.lr=3e-3", r"model.train.lr: .*YAML reads 3e-3 as text: write 3.0e-3"),
    ("quantizer.max_accuracy_drop=1.0e0", r"YAML reads 1.0e0 as text: write 1.0e\+0"),
    ("quantizer.max_accuracy_drop='0.5'", r"a number in quotes is text: remove the quotes"),
])
def test_a_float_yaml_reads_as_text_gets_a_hint_how_to_write_it(case, override, match):
    import pipeline
    with pytest.raises(ConfigError, match=match):
        pipeline.load_config(case, [override])


def test_the_hint_is_a_spelling_yaml_reads_as_the_same_float():
    import yaml
    from pipeline.config.messages import _float_text_hint
    for text in ["1e-45", "-3E2", "7e+10", "2.5e-3", "1.e5"]:
        fixed = _float_text_hint(text).rsplit("write ", 1)[1]
        assert yaml.safe_load(fixed) == float(text), text
    assert _float_text_hint("abc") == ""


@pytest.mark.parametrize("override, match", [
    ("preprocess.std=[1.0e-40]", r"preprocess.std: 1e-40 is below float32's smallest normal number"),
    ("preprocess.mean=[1.0e+39]", r"preprocess.mean: 1e\+39 is beyond float32's range"),
])
def test_a_mean_or_std_that_overflows_float32_is_refused_at_load(case, override, match):
    import pipeline
    with pytest.raises(ConfigError, match=match):
        pipeline.load_config(case, [override])


# ---------------------------------------------------------------------------- .npz members and memory

def test_a_compressed_npz_member_larger_than_the_available_memory_is_refused_before_allocation(tmp_path, monkeypatch):
    from pipeline import cpu
    from pipeline.data.sources import open_source
    from pipeline.errors import DataError
    path = str(tmp_path / "d.npz")
    np.savez_compressed(path, images=np.zeros((10, 20, 20, 1), np.uint8), labels=np.zeros(10, np.int64))
    assert open_source({"type": "npz", "path": path}, str(tmp_path)).images.shape == (10, 20, 20, 1)
    monkeypatch.setattr(cpu, "available_memory_bytes", lambda: 3999)
    with pytest.raises(DataError, match=r"d.npz member images.npy: its \(10, 20, 20, 1\) uint8 data \(4000 bytes "
                                        r"\(3.9 KiB\)\) would be read into memory, but only 3999 bytes \(3.9 KiB\) "
                                        r"is available; store it uncompressed"):
        open_source({"type": "npz", "path": path}, str(tmp_path))


def test_available_memory_is_known_on_linux():
    from pipeline.cpu import available_memory_bytes
    found = available_memory_bytes()
    if os.path.exists("/proc/meminfo"):
        assert isinstance(found, int) and found > 0


# ---------------------------------------------------------------------------- 16-bit images

def _sixteen_bit_folder(root):
    """class a: a 16-bit greyscale PNG (Pillow mode I;16); class b: the same values as a 16-bit colour PNG."""
    import cv2
    from PIL import Image
    values = (np.arange(64, dtype=np.uint16).reshape(8, 8) * 1031)  # 0 .. 64953, most above 255
    os.makedirs(os.path.join(root, "a"))
    os.makedirs(os.path.join(root, "b"))
    Image.fromarray(values).save(os.path.join(root, "a", "grey16.png"))
    cv2.imwrite(os.path.join(root, "b", "colour16.png"), np.repeat(values[..., None], 3, axis=2))
    with Image.open(os.path.join(root, "a", "grey16.png")) as im:
        assert im.mode == "I;16"
    return values


@pytest.mark.parametrize("stream", [False, True])
def test_16_bit_greyscale_and_colour_pngs_become_8_bit_by_their_high_byte(tmp_path, stream):
    from pipeline.data.sources import open_source
    values = _sixteen_bit_folder(str(tmp_path / "imgs"))
    spec = {"type": "image_folder", "root": "imgs", "mode": "RGB", "shuffle": False}
    if stream:
        spec.update(stream=True, workers=0)
    source = open_source(spec, str(tmp_path))
    if stream:
        images = next(iter(source.batches(np.arange(2), 2, None, 0, 1))).view.numpy()
    else:
        images = source.images
    expected = np.repeat((values >> 8).astype(np.uint8)[..., None], 3, axis=2)
    assert images.shape == (2, 8, 8, 3)
    np.testing.assert_array_equal(images[0], expected)  # grey: was clipped to 255 above 255
    np.testing.assert_array_equal(images[1], expected)  # colour: Pillow's own high-byte rule, the same pixels
    assert "high byte, v >> 8" in source.describe()["bit_depth"]


def test_a_float_image_is_refused_naming_the_file_and_the_mode(tmp_path):
    from PIL import Image
    from pipeline.data.sources import open_source
    from pipeline.errors import DataError
    os.makedirs(str(tmp_path / "imgs" / "a"))
    Image.fromarray(np.full((8, 8), 0.5, np.float32)).save(str(tmp_path / "imgs" / "a" / "f.tif"))
    with pytest.raises(DataError, match=r"f.tif has float pixels \(Pillow mode F\), which have no stated range"):
        open_source({"type": "image_folder", "root": "imgs", "extensions": [".tif"], "skip_corrupt": True},
                    str(tmp_path))


# ---------------------------------------------------------------------------- one line, not one per node

def test_a_bit_width_the_qdq_flavour_cannot_hold_is_said_once_for_all_nodes(tmp_path):
    import torch
    from pipeline.errors import ExportError
    from pipeline.quantizers.sim.export.onnx.export import export_onnx
    from pipeline import fixpoint

    class Deep(torch.nn.Module):
        def forward(self, x):
            for _ in range(40):
                x = fixpoint.fake_quant(torch.relu(x), 4, 16, "half_up")
            return x

    gm = torch.fx.symbolic_trace(Deep())
    gm.quant_info = {"output": {}, "param": {}}
    gm.output_fix_pos = 4
    with pytest.raises(ExportError) as err:
        export_onnx(gm, torch.zeros(1, 2, 3, 3), str(tmp_path / "m.onnx"), "qdq")
    message = str(err.value)
    assert message.count("holds at most 8 bits") == 1, message
    assert "40 node(s) are unsupported" in message and "40 nodes [fake_quant (op=call_function" in message
    assert "fake_quant_3 (op=call_function, target=pipeline.fixpoint.fake_quant) and 36 more]" in message
    assert "Supported:" not in message  # the op list is for an op without a lowering
    assert len(message) < 1000


@pytest.mark.parametrize("bitwidth", [1, 17, 32, True])
def test_a_drop_in_bit_width_no_calibration_can_hold_is_refused_before_calibrating(tmp_path, bitwidth):
    """bitwidth=1 used to calibrate and write quant_info.json entries [[1, p]], which test mode then
    refused once per file with 'should be [[bit_width, fix_pos]] with bit_width 2..16'."""
    import torch
    from pipeline.apis import torch_quantizer
    from pipeline.models.zoo import digits_cnn
    with pytest.raises(ConfigError, match=r"bitwidth=%r: expected an integer 2..16" % (bitwidth,)):
        torch_quantizer("calib", digits_cnn().eval(), (torch.zeros(1, 1, 8, 8),), output_dir=str(tmp_path / "q"),
                        bitwidth=bitwidth, device=torch.device("cpu"))
    assert not (tmp_path / "q" / "quant_info.json").exists()


@pytest.mark.parametrize("kwargs, key", [({"num_classes": -1}, "num_classes"), ({"num_classes": 0}, "num_classes"),
                                         ({"num_classes": 10 ** 12}, "num_classes"), ({"in_channels": -3}, "in_channels"),
                                         ({"num_classes": True}, "num_classes"), ({"num_classes": 2.5}, "num_classes")])
@pytest.mark.parametrize("zoo", ["digits_cnn", "resnet18", "mobilenet_v2"])
def test_zoo_class_and_channel_counts_are_checked_naming_the_key(zoo, kwargs, key):
    """A negative count failed inside torch ("negative dimension"), a huge one tried to allocate terabytes."""
    from pipeline.errors import ConfigError
    from pipeline.models.loading import build_model
    with pytest.raises(ConfigError, match=r"model.kwargs.%s: expected a whole number from 1 to " % key):
        build_model(zoo, None, kwargs)


def test_a_factory_failing_on_its_kwargs_values_is_a_config_error():
    from pipeline.errors import ConfigError
    from pipeline.models.loading import build_model
    with pytest.raises(ConfigError, match=r"building torch.nn:Linear with model.kwargs .* failed: .*negative dimension"):
        build_model(None, "torch.nn:Linear", {"in_features": 4, "out_features": -2})
