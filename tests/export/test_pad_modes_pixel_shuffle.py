"""Non-constant pads and pixel shuffle (pipeline/ops/pad.py, pipeline/ops/pixel_shuffle.py) beyond the real
quantizer's files of tests/data/refused_real (reflect_module, replicate_module, reflect_fpad, pixel_shuffle,
held to those files by tests/fidelity/test_refused_real.py) and tests/data/activations_real (pixelunshuffle:
tests/fidelity/test_activations_real.py):

- the interpreter runs XIR pad REFLECT and SYMMETRIC as libxir's op definition states them (its annotation's
  examples), so SYMMETRIC equals torch's replicate for a pad of 1 only, and pixel-shuffle {upscale false} as
  torch's pixel_unshuffle in NHWC (its shape inference: the inverse of the annotation's PixelShuffle);
- the writer writes reflect pads of any width and pixel shuffles and unshuffles of other factors and forms,
  each checked against the simulation by the writer's verify step; a replicate pad over 1 is refused, saying
  why;
- the ONNX exports are exact (Pad reflect / edge, DepthToSpace CRD, Reshape/Transpose/Reshape for pixel
  unshuffle), checked in ONNX Runtime by the exporter;
- the inspector: reflect on the CPU in the real Inspector's words, replicate on the DPU (over 1, with the note
  and the exact rewrite), pixel shuffle and unshuffle on the DPU with their input.
"""
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import ExportError
from pipeline.inspect import inspect_model
from pipeline.xir import interp
from pipeline.xir.xgraph import XGraph
from tests.support.dropin_flow import conv, quantize
from tests.support.lambda_model import Lambda


def _pad_graph(shape, paddings, mode):
    g = XGraph("g")
    x = g.create_op("g__input_0", "data", {"shape": list(shape), "data_type": "FLOAT32"})
    g.create_op("pad", "pad", {"paddings": paddings, "mode": mode}, {"input": [x]})
    return g


@pytest.mark.parametrize("mode,want", [("REFLECT", [[2, 1, 2], [4, 3, 4], [2, 1, 2]]),
                                       ("SYMMETRIC", [[1, 1, 2], [3, 3, 4], [3, 3, 4]])])
def test_interpreter_pads_as_libxirs_definition_says(mode, want):
    """libxir's pad annotation: [[1, 2], [3, 4]] with paddings [0, 1, 1, 0]."""
    out = interp.run(_pad_graph([2, 2], [0, 1, 1, 0], mode), [torch.tensor([[1.0, 2.0], [3.0, 4.0]])])["pad"]
    assert torch.equal(out, torch.tensor(want, dtype=torch.float32))


def test_symmetric_is_replicate_for_a_pad_of_1_only_and_reflect_is_torchs_reflect():
    x = torch.randn(1, 3, 5, 6)
    nhwc = x.permute(0, 2, 3, 1)
    for n in (1, 2):
        pads = [0, 0, n, n, n, n, 0, 0]
        sym = interp.run(_pad_graph([1, 5, 6, 3], pads, "SYMMETRIC"), [x])["pad"]
        ref = interp.run(_pad_graph([1, 5, 6, 3], pads, "REFLECT"), [x])["pad"]
        assert torch.equal(ref, F.pad(x, (n,) * 4, mode="reflect").permute(0, 2, 3, 1))
        assert torch.equal(sym, F.pad(x, (n,) * 4, mode="replicate").permute(0, 2, 3, 1)) == (n == 1)
    assert nhwc.shape == (1, 5, 6, 3)


def test_interpreter_refuses_a_mirror_past_the_input():
    with pytest.raises(interp.InterpreterError, match="REFLECT paddings .* reach past dim 1 of size 2"):
        interp.run(_pad_graph([1, 2, 4, 3], [0, 0, 2, 2, 0, 0, 0, 0], "REFLECT"), [torch.zeros(1, 3, 2, 4)])


@pytest.mark.parametrize("name,model", [
    ("reflect2", Lambda(lambda s, x: s.b(s.p(s.a(x))), a=conv(), p=nn.ReflectionPad2d((2, 1, 0, 3)), b=conv(8, 4))),
    ("replicate1_fn", Lambda(lambda s, x: s.b(F.pad(s.a(x), (1, 1, 1, 1), mode="replicate")), a=conv(), b=conv(8, 4))),
    ("shuffle3", Lambda(lambda s, x: s.b(s.p(s.a(x))), a=conv(3, 18), p=nn.PixelShuffle(3), b=conv(2, 4))),
    ("shuffle_fn", Lambda(lambda s, x: s.b(F.pixel_shuffle(s.a(x), 2)), a=conv(3, 16), b=conv(4, 4))),
    ("unshuffle_fn", Lambda(lambda s, x: s.b(F.pixel_unshuffle(s.a(x), 2)), a=conv(3, 4), b=conv(16, 4))),
    ("unshuffle_out", Lambda(lambda s, x: F.pixel_unshuffle(s.a(x), downscale_factor=2), a=conv(3, 4))),
])
def test_written_checked_against_the_simulation_and_exact_in_onnx(tmp_path, name, model):
    q = quantize(tmp_path, model)
    q.export_xmodel(str(tmp_path / "x"))  # the verify step runs the file against the simulation, or raises
    q.export_onnx_model(str(tmp_path / "o"), native_onnx=False)  # checked in ONNX Runtime, or raises
    q.export_onnx_model(str(tmp_path / "qdq"))  # the QDQ flavour, checked the same way


def test_a_pixel_unshuffle_of_3_written_checked_and_exact_in_onnx(tmp_path):
    q = quantize(tmp_path, Lambda(lambda s, x: s.b(s.p(s.a(x))), a=conv(3, 2), p=nn.PixelUnshuffle(3), b=conv(18, 4)),
                 shape=(3, 9, 6))
    q.export_xmodel(str(tmp_path / "x"))
    q.export_onnx_model(str(tmp_path / "o"), native_onnx=False)
    q.export_onnx_model(str(tmp_path / "qdq"))


def test_interpreter_pixel_shuffle_downscale_is_torchs_pixel_unshuffle_in_nhwc():
    """libxir's pixel-shuffle {upscale false}: [n, h, w, c] -> [n, h/s, w/s, c*s*s], the inverse of the
    annotation's torch.nn.PixelShuffle (and upscale true undoes it)."""
    x = torch.randn(2, 5, 6, 9)
    for upscale, shape, want in ((False, [2, 6, 9, 5], F.pixel_unshuffle(x, 3)),
                                 (True, [2, 2, 3, 45], F.pixel_shuffle(F.pixel_unshuffle(x, 3), 3))):
        g = XGraph("g")
        d = g.create_op("g__input_0", "data", {"shape": shape, "data_type": "FLOAT32"})
        g.create_op("ps", "pixel-shuffle", {"scale": 3, "upscale": upscale}, {"input": [d]})
        src = x if not upscale else F.pixel_unshuffle(x, 3)
        out = interp.run(g, [src])["ps"]
        assert torch.equal(out, want.permute(0, 2, 3, 1))
    assert torch.equal(F.pixel_shuffle(F.pixel_unshuffle(x, 3), 3), x)


def test_a_replicate_pad_over_1_is_refused_saying_why(tmp_path):
    q = quantize(tmp_path, Lambda(lambda s, x: s.b(s.p(s.a(x))), a=conv(), p=nn.ReplicationPad2d(2), b=conv(8, 4)))
    with pytest.raises(ExportError, match="replicate pad \\[2, 2, 2, 2\\]: the real quantizer writes it as XIR pad "
                                          "mode SYMMETRIC, which mirrors the edge"):
        q.export_xmodel(str(tmp_path / "x"))
    q.export_onnx_model(str(tmp_path / "o"), native_onnx=False)  # ONNX's edge mode is replicate at any width


def _verdict(model, name):
    rows = inspect_model(model.eval(), torch.randn(1, 3, 8, 8), "DPUCZDX8G_ISA1_B4096").to_json()["nodes"]
    return next(r for r in rows if r["name"] == name)


def test_inspector_verdicts():
    reflect = _verdict(Lambda(lambda s, x: s.b(s.p(s.a(x))), a=conv(), p=nn.ReflectionPad2d(1), b=conv(8, 4)), "p")
    assert reflect["device"] == "CPU" and reflect["reasons"] == ["DPU only support CONSTANT or SYMMETRIC mode."]
    fn = _verdict(Lambda(lambda s, x: s.b(F.pad(s.a(x), (1, 1, 1, 1), mode="reflect")), a=conv(), b=conv(8, 4)), "pad")
    assert fn["device"] == "CPU" and fn["attrs"] == {"mode": "reflect", "pad": [1, 1, 1, 1]}
    one = _verdict(Lambda(lambda s, x: s.b(s.p(s.a(x))), a=conv(), p=nn.ReplicationPad2d(1), b=conv(8, 4)), "p")
    assert one["device"] == "DPU" and not one["notes"] and not one["fixes"]
    two = _verdict(Lambda(lambda s, x: s.b(s.p(s.a(x))), a=conv(), p=nn.ReplicationPad2d(2), b=conv(8, 4)), "p")
    assert two["device"] == "DPU" and "XIR pad SYMMETRIC" in two["notes"][0] and two["fixes"][0]["exact"]
    shuffle = _verdict(Lambda(lambda s, x: s.b(s.p(s.a(x))), a=conv(3, 16), p=nn.PixelShuffle(2), b=conv(4, 4)), "p")
    assert shuffle["device"] == "DPU" and shuffle["op"] == "pixel_shuffle"
    unshuffle = _verdict(Lambda(lambda s, x: s.b(s.p(s.a(x))), a=conv(3, 4), p=nn.PixelUnshuffle(2), b=conv(16, 4)),
                         "p")
    assert unshuffle["device"] == "DPU" and unshuffle["op"] == "pixel_unshuffle"
    fn = _verdict(Lambda(lambda s, x: s.b(F.pixel_unshuffle(s.a(x), 2)), a=conv(3, 4), b=conv(16, 4)),
                  "pixel_unshuffle")
    assert fn["device"] == "DPU"


def test_the_verify_step_would_catch_a_symmetric_pad_over_1(tmp_path, monkeypatch):
    """Without the lowering's refusal (the real quantizer's file: SYMMETRIC for a replicate pad of 2), the
    interpreter's SYMMETRIC differs from the simulation's replicate, and the writer's verify step refuses."""
    from pipeline import ops
    from pipeline.ops.pad import PAD
    from pipeline.ops.xmodel_support import XmodelForm
    form = ops.XMODEL[PAD]
    monkeypatch.setitem(ops.XMODEL, PAD, XmodelForm(
        lambda lo, node: {"pad_with": [2, 2, 2, 2], "mode": "SYMMETRIC", "constant_values": 0.0}, form.create))
    q = quantize(tmp_path, Lambda(lambda s, x: s.b(s.p(s.a(x))), a=conv(), p=nn.ReplicationPad2d(2), b=conv(8, 4)))
    with pytest.raises(ExportError) as err:
        q.export_xmodel(str(tmp_path / "x"))
    assert "running the written graph differs from the simulation" in str(err.value)
    assert re.search(r"first ops that differ: Lambda__Lambda_ReplicationPad2d_p__ret_\d+_fix \(fix\)", str(err.value))
