"""safe_torch_load: tensors and the real bias_corr.pth format load; code in a pickle never runs."""
import os
import pickle
import zipfile

import pytest
import torch

from pipeline.safeload import safe_torch_load


class _Evil:
    marker = ""

    def __reduce__(self):
        return (os.system, ("touch %s" % _Evil.marker,))


def test_state_dict_and_lists_of_floats_load(tmp_path):
    path = str(tmp_path / "x.pth")
    obj = {"conv.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
           "Net::nndct_conv2d_1": [0.5, -1.25, 3.0e-7], "Net::nndct_dense_2": None}
    torch.save(obj, path)
    got = safe_torch_load(path)
    assert torch.equal(got["conv.weight"], obj["conv.weight"])
    assert got["Net::nndct_conv2d_1"] == [0.5, -1.25, 3.0e-7] and got["Net::nndct_dense_2"] is None


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_a_pickle_that_carries_code_is_refused_and_nothing_executes(tmp_path, fmt):
    _Evil.marker = str(tmp_path / "pwned")
    path = str(tmp_path / "evil.pth")
    if fmt == "zip":
        torch.save({"w": _Evil()}, path)
        assert zipfile.is_zipfile(path)
    else:
        with open(path, "wb") as f:
            pickle.dump({"w": _Evil()}, f)
    with pytest.raises(Exception):
        safe_torch_load(path)
    assert not os.path.exists(_Evil.marker)
