"""The ONNX forms of the generic element-wise float operators (``torch.abs``, ``x.exp()``, ``F.selu``, ...: the
calls the capture names after their aten kind, ``pipeline.xir.aten_ops.ELEMENTWISE``) and of eval-mode
``nn.AlphaDropout``, through the drop-in API: the exact flavour computes the simulation's outputs bit for bit
in ONNX Runtime; off a quantization grid only the ops ONNX Runtime computes exactly are written. An op whose
record declares it has no ONNX form is refused with the record's reason."""
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from pipeline.apis import torch_quantizer  # noqa: E402
from pipeline.errors import ExportError  # noqa: E402
from pipeline.nn import DeQuantStub, QuantStub  # noqa: E402
from tests.support.corpus_models import exact_onnx_outputs  # noqa: E402

FORMS = {
    "abs": lambda y: torch.abs(y),
    "abs_method": lambda y: y.abs(),
    "exp_method": lambda y: y.exp(),
    "log1p": lambda y: torch.log1p(F.relu(y)),
    "sqrt": lambda y: torch.sqrt(F.relu(y)),
    "sign": lambda y: torch.sign(y),
    "selu": lambda y: F.selu(y),
    "square_of_exp": lambda y: torch.square(torch.exp(y)),
}


class Between(nn.Module):
    """conv -> the call -> 1x1 conv (the call's output quantized for the conv), or the call as the output."""

    def __init__(self, form, last=False):
        super().__init__()
        self.c, self.c2, self.drop = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 1), nn.AlphaDropout(0.2)
        self.form, self.last = form, last

    def forward(self, x):
        y = self.c(x)
        y = self.drop(y) if self.form == "alpha_dropout" else FORMS[self.form](y)
        return y if self.last else self.c2(y)


class OffGrid(nn.Module):
    """The call on a DeQuantStub's float output: no quantization grid."""

    def __init__(self, form):
        super().__init__()
        self.q, self.dq, self.c, self.form = QuantStub(), DeQuantStub(), nn.Conv2d(3, 4, 3, padding=1), form

    def forward(self, x):
        y = self.dq(self.c(self.q(x)))
        return {"abs": torch.abs, "neg_method": lambda t: t.neg(), "floor": torch.floor,
                "square": torch.square, "exp": torch.exp}[self.form](y)


def _exported(model, out):
    """Calibrate ``model`` (2 batches), then in test mode export the exact ONNX flavour; returns the
    simulation's output and ONNX Runtime's on the same batch-1 input."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    q = torch_quantizer("calib", model.eval(), (x,), output_dir=out)
    with torch.no_grad():
        q.quant_model(x)
        q.quant_model(torch.randn(2, 3, 8, 8))
    q.export_quant_config()
    q = torch_quantizer("test", model.eval(), (x[:1],), output_dir=out)
    with torch.no_grad():
        y = q.quant_model(x[:1])
    q.export_onnx_model(output_dir=out, native_onnx=False)
    return y.numpy(), exact_onnx_outputs(out, [x[:1]])[0]


@pytest.mark.parametrize("last", [False, True], ids=["before_a_conv", "as_the_output"])
@pytest.mark.parametrize("form", sorted(FORMS) + ["alpha_dropout"])
def test_an_elementwise_float_operator_is_exact_in_onnx_runtime(tmp_path, form, last):
    sim, ort = _exported(Between(form, last), str(tmp_path))
    assert sim.dtype == ort.dtype == np.float32 and sim.shape == ort.shape
    assert np.array_equal(sim.view(np.uint32), ort.view(np.uint32))  # bit for bit
    assert np.unique(sim).size >= 3  # a real signal, not a constant (sign has 3 values)


def test_on_a_quantized_input_it_is_the_table_of_torch_s_values(tmp_path):
    _exported(Between("exp_method"), str(tmp_path))
    model = onnx.load(str(tmp_path / "Between_int.onnx"))
    table = [n for n in model.graph.node if n.op_type == "Gather" and "exp" in n.name]
    assert len(table) == 1 and not [n for n in model.graph.node if n.op_type == "Exp"]


def test_alpha_dropout_in_eval_writes_no_node(tmp_path):
    _exported(Between("alpha_dropout"), str(tmp_path))
    model = onnx.load(str(tmp_path / "Between_int.onnx"))
    assert not [n for n in model.graph.node if "dropout" in n.name.lower() or "Dropout" in n.op_type]


@pytest.mark.parametrize("form", ["abs", "neg_method", "floor", "square"])
def test_off_a_grid_the_exact_onnx_ops_are_written(tmp_path, form):
    sim, ort = _exported(OffGrid(form), str(tmp_path))
    assert np.array_equal(sim.view(np.uint32), ort.view(np.uint32))


def test_off_a_grid_exp_is_refused_with_the_reason(tmp_path):
    with pytest.raises(ExportError) as err:
        _exported(OffGrid("exp"), str(tmp_path))
    message = str(err.value)
    assert "exp of a value off any quantization grid" in message
    assert "rounds otherwise than torch's in the last bits" in message
    assert not (tmp_path / "OffGrid_int.onnx").exists()  # nothing under the final name


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.n = nn.Conv2d(3, 4, 3, padding=1), nn.InstanceNorm2d(4, affine=True)

    def forward(self, x):
        return self.n(self.c(x))


def test_an_op_whose_record_declares_no_onnx_form_is_refused_with_the_record_s_reason(tmp_path):
    from pipeline import ops
    reason = ops.RECORD_OF["nndct_instance_norm"].onnx["nndct_instance_norm"].reason
    with pytest.raises(ExportError) as err:
        _exported(Norm(), str(tmp_path))
    assert "nndct_instance_norm" in str(err.value) and "no ONNX form: " + reason in str(err.value)
