"""The known refusals (pipeline/fx/refusals.py): each op a stage refuses says the true reason, which of
"this project has no form for it yet (the real quantizer handles it; meanwhile ...)", "traced
differently" and "not supported by the real quantizer either" it is, and where it is refused.

The reasons are the real quantizer's, from its source (docs/xmodel.md#known-refusals): Conv1d, the
instance and group norms are quantized ops of their own there, so the simulation refuses them before
calibration; a matmul of two tensors the real quantizer writes wrong (channels-last carried through it, a
transposed first operand folded into ``transpose_b``) is refused by the xmodel writer; max over a dim the xmodel carries and the ONNX exporter does not; LSTM is quantized in the real
quantizer's RNN mode only.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.apis import torch_quantizer
from pipeline.errors import ExportError, QuantizationError
from pipeline.fx import refusals
from tests.support.dropin_flow import conv, quantize
from tests.support.lambda_model import Lambda

REAL_QUANTIZER = "the real quantizer in the Vitis AI image (the runner: quantizer.backend: nndct"
WRONG = "torch.jit traces this call"  # the reason these ops used to get


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.l = conv(), nn.LSTM(8, 8, batch_first=True)

    def forward(self, x):
        return self.l(self.a(x).flatten(2).transpose(1, 2))[0]


@pytest.mark.parametrize("name,model,shape,what,real", [
    ("conv1d_functional", Lambda(lambda s, x: torch.nn.functional.conv1d(x, s.w), w=nn.Parameter(torch.ones(4, 3, 3))),
     (3, 16), "Conv1d", "quantizes it as a conv, its own op nndct_conv1d with weights, bias and output on fix-point "
                        "grids, and writes XIR conv1d"),
    ("instancenorm", Lambda(lambda s, x: s.n(s.a(x).flatten(2)), a=conv(), n=nn.InstanceNorm1d(8)), (3, 8, 8),
     "InstanceNorm",
     "quantizes it as its own op, with input, weight, bias and output on fix-point grids"),
    ("groupnorm", Lambda(lambda s, x: s.n(s.a(x)), a=conv(), n=nn.GroupNorm(2, 8)), (3, 8, 8), "GroupNorm",
     "quantizes it as its own op, with input, weight, bias and output on fix-point grids"),
])
def test_what_the_simulation_has_no_form_for_is_refused_before_calibration(tmp_path, name, model, shape, what, real):
    with pytest.raises(QuantizationError) as err:
        torch_quantizer("calib", model.eval(), torch.randn((1,) + shape), output_dir=str(tmp_path / "q"))
    message = str(err.value)
    assert "(%s): the simulation has no form for %s yet, and running it in float would not give the real " \
           "quantizer's numbers" % (what, what) in message
    assert real in message and "meanwhile quantize and export it with " + REAL_QUANTIZER in message
    assert WRONG not in message


def test_the_nndct_backend_leaves_only_its_simulated_sensitivity_out(tmp_path, caplog):
    """The real quantizer quantizes an F.conv1d (the remedy the refusal gives): the per-layer sensitivity of
    its calibration, which runs on the simulation, is left out with the reason, and nothing else stops."""
    from pipeline.quantizers.base import QuantSettings
    from pipeline.quantizers.nndct import NndctBackend
    from pipeline.sensitivity import layer_sensitivity, simulated_model
    model = Lambda(lambda s, x: torch.nn.functional.conv1d(x, s.w), w=nn.Parameter(torch.ones(4, 3, 3))).eval()
    with caplog.at_level("WARNING", logger="pipeline"):
        handle = simulated_model(None, NndctBackend.simulates, model, torch.randn(1, 3, 16), str(tmp_path),
                                 QuantSettings())
    assert handle is None
    assert "per-layer sensitivity left out: it runs on the simulation, and node 'conv1d' (Conv1d): the simulation " \
           "has no form for Conv1d yet" in caplog.text
    assert layer_sensitivity(model, None, {}, iter(()), QuantSettings()) == []


def test_conv_transpose1d_is_not_supported_by_the_real_quantizer_either(tmp_path):
    with pytest.raises(QuantizationError, match="ConvTranspose1d is not supported by the real quantizer either: the "
                                                "real quantizer's parser raises 'ConvTranpose1D is unsupported'"):
        torch_quantizer("calib", Lambda(lambda s, x: s.t(x), t=nn.ConvTranspose1d(3, 4, 3)).eval(),
                        torch.randn(1, 3, 16), output_dir=str(tmp_path / "q"))


@pytest.mark.parametrize("name,model,what,real,onnx", [
    ("lstm", LSTMNet(), "LSTM / GRU", "the real quantizer quantizes recurrent layers in its RNN mode, "
     "torch_quantizer(..., lstm=True), which this project does not simulate", True),
])
def test_what_the_writers_have_no_form_for_names_the_real_quantizers_form(tmp_path, name, model, what, real, onnx):
    q = quantize(tmp_path, model)  # calibration and test run
    with pytest.raises(ExportError) as err:
        q.export_xmodel(str(tmp_path / "x"))
    message = str(err.value)
    assert "cannot be written: the xmodel writer has no XIR form for %s yet: %s" % (what, real) in message
    assert "; meanwhile " in message and WRONG not in message
    if onnx:
        with pytest.raises(ExportError) as err:
            q.export_onnx_model(str(tmp_path / "o"), native_onnx=False)
        assert "the ONNX exporter has no lowering for %s yet: %s" % (what, real) in str(err.value)
    else:
        q.export_onnx_model(str(tmp_path / "o"), native_onnx=False)


@pytest.mark.parametrize("name,model,why", [
    ("channels_last", Lambda(lambda s, x: torch.matmul(s.a(x), s.b(x)), a=conv(), b=conv()),
     "the real quantizer's layout pass (layout_tranform) carries channels-last (0, 2, 3, 1) through it"),
    ("first_transposed", Lambda(lambda s, x: s.a(x).flatten(2).transpose(1, 2) @ s.b(x).flatten(2), a=conv(), b=conv()),
     "its first operand is a transpose of the last two dims, which the real quantizer folds into transpose_b"),
])
def test_a_matmul_the_real_quantizer_writes_wrong_is_refused(tmp_path, name, model, why):
    """nndct's deploy passes (``layout_tranform``, ``fuse_transpose_matmul``) write these two products as files
    that compute something else (checked against the real quantizer's files); the writer refuses them."""
    q = quantize(tmp_path, model)
    with pytest.raises(ExportError) as err:
        q.export_xmodel(str(tmp_path / "x"))
    assert "(nndct_matmul) cannot be written: " + why in str(err.value)


def test_attention_s_matmuls_are_written_as_xir_matmul(tmp_path):
    """``q @ k.transpose(-2, -1)`` and ``attn @ v`` on flattened conv maps: XIR matmul, the transpose folded into
    ``transpose_b`` (as the real quantizer's file of the same model, compared by hand); the writer's own check
    runs the file against the simulation bit for bit."""
    from tests.support import xmodel_compare
    model = Lambda(lambda s, x: s.d(torch.softmax(s.a(x).flatten(2) @ s.b(x).flatten(2).transpose(-2, -1), -1)
                                    @ s.c(x).flatten(2)), a=conv(), b=conv(), c=conv(), d=nn.Linear(64, 4))
    q = quantize(tmp_path, model)
    q.export_xmodel(str(tmp_path / "x"))
    graph = xmodel_compare.load(str(tmp_path / "x" / "Lambda_int.xmodel"))
    flags = [(str(o.op_attr["transpose_a"]).split()[-1], str(o.op_attr["transpose_b"]).split()[-1],
              len(o.args[0].arg_ops)) for o in graph.op_node if o.op_type == "matmul"]
    assert sorted(flags) == sorted([("false", "true", 2), ("false", "false", 2), ("false", "true", 2)])


@pytest.mark.parametrize("name,model", [
    ("max_dim", Lambda(lambda s, x: s.a(x).max(1)[0], a=conv())),
    ("max_dim_values", Lambda(lambda s, x: s.a(x).max(dim=1, keepdim=True).values, a=conv())),
])
def test_max_over_a_dim_is_written_to_the_xmodel_and_refused_by_onnx(tmp_path, name, model):
    """nndct_max: XIR reduction_max in the xmodel (checked against the simulation as it is written); the ONNX
    exporter names its row."""
    q = quantize(tmp_path, model)
    q.export_xmodel(str(tmp_path / "x"))
    with pytest.raises(ExportError) as err:
        q.export_onnx_model(str(tmp_path / "o"), native_onnx=False)
    assert "the ONNX exporter has no lowering for max over a dim (values and indices) yet: the real quantizer " \
           "writes it as XIR reduction_max" in str(err.value)


def test_a_call_traced_as_other_ops_still_says_so(tmp_path):
    """F.normalize: one call to fx, its norm, clamp, expand and div to torch.jit (whose op names the xmodel takes)."""
    q = quantize(tmp_path, Lambda(lambda s, x: F.normalize(s.a(x), dim=1), a=conv()))
    with pytest.raises(ExportError, match="torch.jit traces this call as other ops .no traced op of kind normalize"):
        q.export_xmodel(str(tmp_path / "x"))


def test_max_without_a_dim_is_not_described_as_one():
    known = refusals.METHODS["max"]
    graph = torch.fx.symbolic_trace(Lambda(lambda s, x: x.max()))
    node = next(n for n in graph.graph.nodes if n.op == "call_method")
    assert refusals.lookup(node) is known and known.several
    assert refusals.explain(node, None, refusals.ONNX, "its own reason") == "its own reason"
    assert refusals.explain(node, None, refusals.ONNX, "its own reason", several=True).startswith(
        "the ONNX exporter has no lowering for max over a dim")


def test_every_row_says_which_kind_of_refusal_it_is_and_where():
    rows = set(refusals.MODULES.values()) | set(refusals.FUNCTIONS.values()) | set(refusals.METHODS.values())
    for row in rows:
        assert row.kind in (refusals.NOT_YET, refusals.TRACED_OTHERWISE, refusals.NOT_IN_REAL), row
        assert row.stops and row.stops <= {refusals.SIMULATION, refusals.XMODEL, refusals.ONNX}, row
        assert row.real.startswith("the real quantizer") and row.instead, row
        for stage in row.stops:
            text = refusals.reason(row, stage)
            assert row.what in text and row.real in text and row.instead in text


def _assign_mask(z):
    m = z.new_zeros((z.shape[-1], z.shape[-1]))
    m[:4, :] = 1.0
    return z + m


torch.fx.wrap("_assign_mask")


def test_an_assignment_into_a_tensor_is_refused_by_the_xmodel_writer(tmp_path):
    """``m[:4] = 1.0`` into a ``new_zeros`` tensor: the real quantizer's file (checked by hand on this model)
    holds the zeros as a const of zeros and an ``aten::fill_`` nothing reads, so it adds zeros; refused."""
    model = Lambda(lambda s, x: _assign_mask(s.a(x).flatten(2) @ s.b(x).flatten(2).transpose(-2, -1)),
                   a=conv(), b=conv())
    q = quantize(tmp_path, model)
    with pytest.raises(ExportError, match=r"\(aten::fill_, setitem\) cannot be written: it assigns into a tensor in "
                                          r"place \(x\[idx\] = v\)"):
        q.export_xmodel(str(tmp_path / "x"))


@pytest.mark.parametrize("name,model,types", [
    ("new_zeros", Lambda(lambda s, x: s.b(s.a(x)) + s.c(x).new_zeros((8, 8)), a=conv(), b=conv(8, 8), c=conv()),
     {"const"}),
    ("masked_fill", Lambda(lambda s, x: (lambda z: z.masked_fill(z == 0, 1.0))(
        s.a(x).flatten(2) @ s.b(x).flatten(2).transpose(-2, -1)), a=conv(), b=conv()),
     {"nndct_equal", "aten::masked_fill"}),
])
def test_zeros_and_a_comparison_are_written_as_the_real_quantizer_writes_them(tmp_path, name, model, types):
    """``new_zeros``: a const of zeros with its fix; ``z == 0``: the custom op ``nndct_equal`` of data_type bool,
    then ``aten::masked_fill`` (both as the real quantizer's files of these models, compared by hand); the writer's
    own check runs each file against the simulation."""
    from tests.support import xmodel_compare
    q = quantize(tmp_path, model)
    q.export_xmodel(str(tmp_path / "x"))
    graph = xmodel_compare.load(str(tmp_path / "x" / "Lambda_int.xmodel"))
    written = {o.op_type for o in graph.op_node}
    assert types <= written
    for o in graph.op_node:
        if o.op_type == "nndct_equal":
            assert o.op_attr["data_type"].string_value == "bool"
