"""export.deploy_check on the nndct backend, against the fake ``pytorch_nndct`` (tests/support/nndct_fake.py):
``export_xmodel(deploy_check=True)`` is called, its ``deploy_check_data_int/<Model>/`` folder is moved next
to the xmodel in one rename (replacing an earlier one) and named in the result; no dumps is an error."""
import os

import pytest
import torch

from pipeline.errors import ExportError
from pipeline.quantizers import nndct
from pipeline.quantizers.base import DEPLOY_CHECK, QuantSettings
from tests.support import nndct_fake


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = torch.nn.Flatten()
        self.fc = torch.nn.Linear(12, 4)

    def forward(self, x):
        return self.fc(self.flatten(x))


@pytest.fixture
def handle(tmp_path, monkeypatch):
    """A test-mode handle of the fake quantizer on a calibration of ``Net``; yields (handle, apis)."""
    nndct_fake.install(tmp_path / "site", monkeypatch)
    monkeypatch.setattr(nndct, "_MODES_CREATED", set())
    backend, out = nndct.NndctBackend(), str(tmp_path / "quantize_result")
    batches = [torch.rand(2, 3, 2, 2) for _ in range(2)]
    backend.calibrate(Net().eval(), batches[0], batches, out, QuantSettings())
    monkeypatch.setattr(nndct, "_MODES_CREATED", set())  # test mode in the same process, as the fake allows
    yield backend.load_test(Net().eval(), torch.zeros(4, 3, 2, 2), out, QuantSettings()), nndct_fake.apis()
    nndct_fake.forget()


def _calls(apis):
    return [c[1]["deploy_check"] for c in apis.CALLS if c[0] == "export_xmodel"]


def test_deploy_check_is_passed_to_export_xmodel_and_the_dumps_moved_next_to_the_xmodel(handle, tmp_path):
    h, apis = handle
    dest = str(tmp_path / "export")
    os.makedirs(os.path.join(dest, "deploy_check_data_int", "Net"))
    with open(os.path.join(dest, "deploy_check_data_int", "Net", "stale.bin"), "wb") as f:
        f.write(b"an earlier export's")
    files = nndct.NndctBackend().export(h, torch.zeros(1, 3, 2, 2), dest, ["xmodel"], deploy_check=True)
    folder = os.path.join(dest, "deploy_check_data_int", "Net")
    assert files == {"xmodel": os.path.join(dest, "Net_int.xmodel"), DEPLOY_CHECK: folder}
    assert _calls(apis) == [True]
    assert sorted(os.listdir(folder)) == ["Net__input_0.bin", "shape.txt"]  # the earlier folder replaced whole
    assert sorted(os.listdir(dest)) == ["Net_int.xmodel", "deploy_check_data_int"]  # no temporary folder left


def test_deploy_check_off_by_default_and_missing_dumps_or_xmodel_are_errors(handle, tmp_path):
    h, apis = handle
    dest = str(tmp_path / "export")
    files = nndct.NndctBackend().export(h, torch.zeros(1, 3, 2, 2), dest, ["xmodel", "onnx_qdq"])
    assert DEPLOY_CHECK not in files and _calls(apis) == [False]
    assert not os.path.exists(os.path.join(dest, "deploy_check_data_int"))
    apis.BEHAVIOUR["no_dumps"] = True
    with pytest.raises(ExportError, match=r"deploy-check dumps of one graph in deploy_check_data_int/, the quantizer "
                                          r"wrote none"):
        nndct.NndctBackend().export(h, torch.zeros(1, 3, 2, 2), str(tmp_path / "e"), ["xmodel"], deploy_check=True)
    assert os.listdir(str(tmp_path / "e")) == []
    apis.BEHAVIOUR.clear()
    apis.BEHAVIOUR["write_nothing"] = True  # dumps but no xmodel: neither is kept
    with pytest.raises(ExportError, match=r"expected one \*_int.xmodel file, the quantizer wrote none"):
        nndct.NndctBackend().export(h, torch.zeros(1, 3, 2, 2), str(tmp_path / "f"), ["xmodel"], deploy_check=True)
    assert os.listdir(str(tmp_path / "f")) == []
