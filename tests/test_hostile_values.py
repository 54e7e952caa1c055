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
