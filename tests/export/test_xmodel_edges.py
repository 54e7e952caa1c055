"""export_xmodel on the cases a fresh user's trial broke: outputs that end in torch's layout are
written and verified; what the writer cannot carry is refused with an error naming the node and
the reason, and nothing is written; bad arguments give an error, not a traceback."""
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.apis import torch_quantizer
from pipeline.errors import ExportError, StorageError
from pipeline.xir import reader
from pipeline.quantizers.sim.xmodel import verify
from tests.support.dropin_flow import conv, quantize
from tests.support.lambda_model import Lambda


@pytest.mark.parametrize("name,fn,modules", [
    ("silu_output", lambda s, x: F.silu(s.a(x)), {"a": conv()}),  # aten::silu runs in NCHW: a sink transpose ends it
    ("mean_keepdim", lambda s, x: s.a(x).mean((2, 3), keepdim=True), {"a": conv()}),
    ("input_scaled", lambda s, x: x * 0.5, {}),  # no NHWC op at all
])
def test_an_output_in_torchs_layout_is_written_and_verified(tmp_path, name, fn, modules):
    q = quantize(tmp_path, Lambda(fn, **modules))
    path = q.export_xmodel(str(tmp_path / "x"))
    graph = reader.check(reader.read_xmodel(path))
    g = torch.Generator().manual_seed(5)
    report = verify.compare(graph, q._session, q.quant_model, [torch.randn(1, 3, 8, 8, generator=g)])
    assert report["elements"] > 0 and report["mismatches"] == 0 and report["nodes_differing"] == []


@pytest.mark.parametrize("name,fn,modules", [
    # a comparison's bool result: the file holds it as float32, the simulation's torch.where takes a bool
    ("where", lambda s, x: (lambda y: torch.where(y > 0, y, y * 0.5))(s.a(x)), {"a": conv()}),
    ("where_two_convs", lambda s, x: torch.where(s.a(x) > s.b(x), s.a2(x), s.b2(x)),
     {"a": conv(), "b": conv(), "a2": conv(), "b2": conv()}),
])
def test_torch_where_is_written_and_verified(tmp_path, name, fn, modules):
    q = quantize(tmp_path, Lambda(fn, **modules))
    graph = reader.check(reader.read_xmodel(q.export_xmodel(str(tmp_path / "x"))))
    assert "aten::where" in [op.type for op in graph.ops]
    g = torch.Generator().manual_seed(5)
    report = verify.compare(graph, q._session, q.quant_model, [torch.randn(1, 3, 8, 8, generator=g)])
    assert report["elements"] == 8 * 8 * 8 and report["mismatches"] == 0 and report["nodes_differing"] == []


@pytest.mark.parametrize("name,fn,modules", [
    ("add_self", lambda s, x: (lambda y: y + y)(s.a(x)), {"a": conv()}),
    ("cat_self", lambda s, x: (lambda y: torch.cat([y, y], 1))(s.a(x)), {"a": conv()}),
    # the layer scale after a permute back to NCHW (ConvNeXt's): the (C, 1, 1) parameter first, as torch holds it
    ("param_first", lambda s, x: s.w * s.a(x).permute(0, 2, 3, 1).permute(0, 3, 1, 2),
     {"a": conv(), "w": nn.Parameter(torch.rand(8, 1, 1) + 0.5)}),
])
def test_repeated_and_parameter_operands_are_written_and_verified(tmp_path, name, fn, modules):
    """The same tensor twice (the same fix op twice among the op's inputs) and a parameter operand (a float
    const of its name), as the real quantizer writes them (tests/data/refused_real: square, cat_self,
    param_tokens; corpus_real/tv_convnext)."""
    q = quantize(tmp_path, Lambda(fn, **modules))
    graph = reader.check(reader.read_xmodel(q.export_xmodel(str(tmp_path / "x"))))
    g = torch.Generator().manual_seed(5)
    report = verify.compare(graph, q._session, q.quant_model, [torch.randn(1, 3, 8, 8, generator=g)])
    assert report["elements"] > 0 and report["mismatches"] == 0 and report["nodes_differing"] == []
    op = [o for o in graph.ops if o.type in ("add", "concat", "mul")][0]
    ins = [i.name for i in op.inputs["input"]]
    if name == "param_first":
        assert ins[0].endswith("__w") and graph.get_op(ins[0]).type == "const"
    else:
        assert len(ins) == 2 and ins[0] == ins[1]


def test_a_tensor_returned_twice_is_one_op_read_by_both_outputs(tmp_path):
    q = quantize(tmp_path, Lambda(lambda s, x: (lambda y: (y, s.b(y), y))(s.a(x)), a=conv(), b=conv(8, 4)))
    graph = reader.check(reader.read_xmodel(q.export_xmodel(str(tmp_path / "x"))))
    g = torch.Generator().manual_seed(5)
    report = verify.compare(graph, q._session, q.quant_model, [torch.randn(1, 3, 8, 8, generator=g)])
    ops = [o["op"] for o in report["outputs"]]
    assert len(ops) == 3 and ops[0] == ops[2] != ops[1] and ops[0].endswith("_fix")
    assert [o["shape"] for o in report["outputs"]] == [[1, 8, 8, 8], [1, 4, 8, 8], [1, 8, 8, 8]]
    assert report["mismatches"] == 0 and report["nodes_differing"] == []


@pytest.mark.parametrize("fn,modules,needle", [
    (lambda s, x: s.t(s.a(x)), {"a": conv(), "t": nn.ConvTranspose2d(8, 4, 3, 2, 1, output_padding=1)},
     "output_padding=(1, 1)"),
    (lambda s, x: s.t(s.a(x)), {"a": conv(), "t": nn.ConvTranspose2d(8, 4, 4, 2, 1, groups=2)}, "groups=2"),
    (lambda s, x: s.p(s.a(x)), {"a": conv(), "p": nn.MaxPool2d(3, 1, dilation=2)}, "dilation=(2, 2)"),
    # a (1, C, 1, 1) parameter broadcasts to the NHWC (1, 8, 8, 8) along H: the real quantizer's constant is not the
    # model's; a (C, 1, 1) one does not broadcast there (the real quantizer fails: tests/data/refused_real/param_add)
    (lambda s, x: s.a(x) + s.a2(x) + s.w, {"a": conv(), "a2": conv(),
                                           "w": nn.Parameter(torch.arange(8.0).reshape(1, 8, 1, 1) / 8)},
     "along other dimensions than torch broadcasts it"),
    (lambda s, x: s.a(x) * s.w, {"a": conv(3, 4), "w": nn.Parameter(torch.arange(4.0).reshape(4, 1, 1))},
     "broadcast_const_for_binary_op: operands could not be broadcast"),
    (lambda s, x: {"y": s.a(x)}, {"a": conv()}, "the model returns a dict"),
])
def test_what_the_writer_cannot_carry_is_refused_by_name_and_nothing_is_written(tmp_path, fn, modules, needle):
    q = quantize(tmp_path, Lambda(fn, **modules))
    with pytest.raises(ExportError, match="xmodel") as err:
        q.export_xmodel(str(tmp_path / "x"))
    assert needle in str(err.value)
    assert not os.path.exists(str(tmp_path / "x")) or os.listdir(str(tmp_path / "x")) == []


def test_output_dir_that_is_a_file_or_not_a_path(tmp_path):
    q = quantize(tmp_path, Lambda(lambda s, x: s.a(x), a=conv()))
    afile = tmp_path / "afile"
    afile.write_text("keep")
    for bad in (str(afile), str(afile / "sub")):
        with pytest.raises(StorageError, match="is a file"):
            q.export_xmodel(bad)
    assert afile.read_text() == "keep"
    with pytest.raises(ExportError, match="output_dir must be a folder path"):
        q.export_xmodel(None)


def test_a_first_forward_by_keyword_is_refused_with_a_clear_error(tmp_path):
    class Kw(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = conv()

        def forward(self, x):
            return self.a(x)

    model = Kw().eval()
    example = torch.randn(1, 3, 8, 8)
    q = torch_quantizer("calib", model, example, output_dir=str(tmp_path / "q"))
    q.quant_model(torch.randn(4, 3, 8, 8))
    q.export_quant_config()
    q = torch_quantizer("test", model, example, output_dir=str(tmp_path / "q"))
    q.quant_model(x=torch.randn(1, 3, 8, 8))
    with pytest.raises(ExportError, match="passed its inputs by keyword"):
        q.export_xmodel(str(tmp_path / "x"))


@pytest.mark.parametrize("dim", [1, -1])
def test_a_custom_op_laid_out_nhwc_is_checked_in_the_models_layout_when_its_dims_are_alike(tmp_path, dim):
    """F.log_softmax(conv(x), dim) with C = H = W = 8: the file holds nndct_log_softmax's data NHWC, the
    simulation NCHW, and the dims cannot tell them apart; the writer's check still runs the simulation's call
    on the data read as NCHW (the input's bits tell), so the file is written."""
    model = Lambda(lambda s, x: s.b(F.log_softmax(s.a(x), dim=dim)), a=nn.Conv2d(3, 8, 3, padding=1),
                   b=nn.Conv2d(8, 4, 1))
    q = quantize(tmp_path, model, (3, 8, 8))
    q.export_xmodel(str(tmp_path / "x"))
    assert os.listdir(str(tmp_path / "x"))
