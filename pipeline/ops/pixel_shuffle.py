"""Pixel shuffle (``nndct_pixel_shuffle``): ``nn.PixelShuffle`` and ``F.pixel_shuffle``; ``nn.PixelUnshuffle``
and ``F.pixel_unshuffle`` are refused by the exports.

nndct's parser makes ``aten::pixel_shuffle`` a ``nndct_pixel_shuffle`` node with ``scale`` (the upscale
factor) and ``upscale`` True (``OpDispatcher.pixel_shuffle``). It moves data only: nndct lists it with the
ops that never carry a fix position of their own (``NndctGraphHolder``'s ``MULTIPLE_OUTPUTS_OPS``, "no
calculation and only tensor in-place operation") and joins it to its producer's quantization group
(``SoftFusePixelShuffle``), so quant_info.json has no output entry for it and the xmodel no ``fix`` after
it. The deploy graph holds it NHWC (an implicit op of ``DevGraphOptimizer.layout_tranform``) and
``xop_creator.py`` writes XIR ``pixel-shuffle {scale, upscale}``. XIR defines the op as
``torch.nn.PixelShuffle`` (libxir ``built_in_ops.cpp``, its annotation) on NHWC feature maps: output
``[n, h*r + i, w*r + j, c]`` is input ``[n, h, w, c*r*r + i*r + j]``, torch's channel order.

nndct's DPU partition (``pytorch_nndct/hardware/dpu_partition.py``) lists ``PIXEL_SHUFFLE`` among the
types it converts to XIR with no filter and not CPU-only: the DPU takes it on every target, as it takes
its input.
"""
from typing import Any, Optional

import torch.nn.functional as F
from torch import nn

from .dpu_support import DPU, Verdict, cpu_verdict, follows
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec
from .refusal import Known, NOT_YET, ONNX, REAL_QUANTIZER, XMODEL
from .sim_support import TORCH
from .xir_support import IN, OpDef, TO_NHWC, XirOp, attr, fail, one, op_input, req, unsupported
from .xmodel_support import XmodelForm

PIXEL_SHUFFLE = "nndct_pixel_shuffle"

PIXEL_UNSHUFFLE = Known(
    what="PixelUnshuffle / pixel_unshuffle", kind=NOT_YET, stops=frozenset((XMODEL, ONNX)), several=False,
    real="the real quantizer writes it as XIR pixel-shuffle {upscale false}",
    instead=REAL_QUANTIZER + "; calibration and test here are not affected")


def _factor(mod: Optional[nn.Module], value: Any) -> int:
    """The upscale factor: the module's, else the call's ``upscale_factor``."""
    return int(mod.upscale_factor if mod is not None else value)


def _onnx_pixel_shuffle(b: Any, node: Any, mod: Optional[nn.Module]) -> str:
    """DepthToSpace mode CRD (opset 13), torch's channel order (``out[n, c, h*r + i, w*r + j] =
    in[n, c*r*r + i*r + j, h, w]``): the same values, moved. 4-D NCHW only.

    Raises:
        Unsupported: an input of another rank (DepthToSpace takes 4-D)."""
    r = _factor(mod, None if mod is not None else b.static(arg(node, 1, "upscale_factor")))
    if len(b.shape(node.args[0])) != 4:
        raise Unsupported("pixel_shuffle of a %d-D input (ONNX DepthToSpace is 4-D)" % len(b.shape(node.args[0])))
    return b.op("DepthToSpace", [b.tensor(node.args[0])], node.name, blocksize=r, mode="CRD")


def dpu_pixel_shuffle(node: Any, ctx: Any) -> Verdict:
    """On the DPU with its input (nndct's DPU partition converts it with no filter, module docstring)."""
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return cpu_verdict("The input of pixel_shuffle is not on DPU.", fixes=[follows(src.name)])
    return Verdict(DPU)


def _lower_pixel_shuffle(lo, node) -> dict:
    """scale (the upscale factor) and upscale True (``OpDispatcher.pixel_shuffle``).

    Raises:
        XmodelUnsupported: an input that is not 4-D (XIR's pixel-shuffle is NHWC)."""
    m = lo.module(node)
    r = _factor(m, None if m is not None else lo.call_args(node)["upscale_factor"])
    x = lo.values.get(node.fx_node.args[0])
    if x is not None and x.dim() != 4:
        raise lo.unsupported(node, "pixel_shuffle of a %d-D input (XIR pixel-shuffle is NHWC)" % x.dim())
    return {"scale": r, "upscale": True}


def _create_pixel_shuffle(w, node) -> None:
    """XIR ``pixel-shuffle {scale, upscale}`` on its input; no fix after it (no output entry: docstring)."""
    a = node.attrs
    w.fixed_op(node.name, "pixel-shuffle", {"scale": a["scale"], "upscale": a["upscale"]},
               {"input": w.data_inputs(node)})


def _shape_pixel_shuffle(op):
    """[n, h*s, w*s, c/s²] when ``upscale``, else [n, h/s, w/s, c*s²] (libxir ``shape_infer_pixel_shuffle``)."""
    dims, s = list(op_input(op).shape), attr(op, "scale", "int32")
    if len(dims) < 4 or s <= 0:
        raise unsupported(op, "input %s with scale %d" % (dims, s))
    n, h, w, c = dims[:4]
    if attr(op, "upscale", "bool"):
        if c % (s * s):
            raise fail(op, "input channels %d are not a multiple of scale² %d" % (c, s * s))
        return [n, h * s, w * s, c // (s * s)], {}
    if w % s or h % s:
        raise fail(op, "input height and width %d, %d are not multiples of scale %d" % (h, w, s))
    return [n, h // s, w // s, c * s * s], {}


def _run_pixel_shuffle(run, op, ins):
    """torch's ``pixel_shuffle`` (``upscale``) or ``pixel_unshuffle`` on the NCHW form of the NHWC input."""
    x, s = run.nchw(op, one(ins)), int(op.attr("scale"))
    y = F.pixel_shuffle(x, s) if op.attr("upscale") else F.pixel_unshuffle(x, s)
    return run.checked(op, y.permute(TO_NHWC))


RECORD = OpRecord(
    family="pixel_shuffle",
    specs={PIXEL_SHUFFLE: OpSpec("layout", False, True, True)},
    modules={nn.PixelShuffle: PIXEL_SHUFFLE},
    functions={F.pixel_shuffle: PIXEL_SHUFFLE},
    signatures={PIXEL_SHUFFLE: (("input", "upscale_factor"), {})},
    approximation=Absent("moves data only: the values are its input's"),
    source="nndct_shared/base/key_names.py (PIXEL_SHUFFLE, PIXEL_UNSHUFFLE); pytorch_nndct/parse/op_dispatcher.py "
           "(OpDispatcher.pixel_shuffle); nndct_shared/quantization/commander.py (SoftFusePixelShuffle); "
           "nndct_shared/compile/xop_creator.py; libxir built_in_ops.cpp, shape_inference.cpp (pixel-shuffle)",
    onnx={PIXEL_SHUFFLE: _onnx_pixel_shuffle},
    dpu_rule={PIXEL_SHUFFLE: DpuRule(("pixel_shuffle",), dpu_pixel_shuffle)},
    xmodel={PIXEL_SHUFFLE: XmodelForm(_lower_pixel_shuffle, _create_pixel_shuffle, nhwc=True)},
    xir_ops={"pixel-shuffle": XirOp(OpDef("pixel-shuffle", IN, (req("scale", "int32"), req("upscale", "bool")),
                                          _shape_pixel_shuffle), _run_pixel_shuffle, "pixel_shuffle")},
    traced={PIXEL_SHUFFLE: ("pixel_shuffle",)},
    refusals={nn.PixelUnshuffle: PIXEL_UNSHUFFLE, F.pixel_unshuffle: PIXEL_UNSHUFFLE},
    sim={PIXEL_SHUFFLE: TORCH},
)
