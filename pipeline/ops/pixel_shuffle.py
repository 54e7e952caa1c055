"""Pixel shuffle (``nndct_pixel_shuffle``: ``nn.PixelShuffle``, ``F.pixel_shuffle``) and pixel unshuffle
(``nndct_pixel_unshuffle``: ``nn.PixelUnshuffle``, ``F.pixel_unshuffle``).

nndct's parser makes ``aten::pixel_shuffle`` a ``nndct_pixel_shuffle`` node with ``scale`` (the upscale
factor) and ``upscale`` True (``OpDispatcher.pixel_shuffle``). It moves data only: nndct lists it with the
ops that never carry a fix position of their own (``NndctGraphHolder``'s ``MULTIPLE_OUTPUTS_OPS``, "no
calculation and only tensor in-place operation") and joins it to its producer's quantization group
(``SoftFusePixelShuffle``), so quant_info.json has no output entry for it and the xmodel no ``fix`` after
it. The deploy graph holds it NHWC (an implicit op of ``DevGraphOptimizer.layout_tranform``) and
``xop_creator.py`` writes XIR ``pixel-shuffle {scale, upscale}``. XIR defines the op as
``torch.nn.PixelShuffle`` (libxir ``built_in_ops.cpp``, its annotation) on NHWC feature maps: output
``[n, h*r + i, w*r + j, c]`` is input ``[n, h, w, c*r*r + i*r + j]``, torch's channel order.

Pixel unshuffle is ``aten::pixel_unshuffle``, a ``nndct_pixel_unshuffle`` node with ``scale`` (the
downscale factor) and ``upscale`` False (``OpDispatcher.pixel_unshuffle``). Unlike pixel shuffle nndct
neither lists it in ``MULTIPLE_OUTPUTS_OPS`` nor soft-fuses it (the commander has no ``SoftFuse`` for
it): it is a node of its own quantization group, so quant_info.json has an output entry for it
(``nndct_pixel_unshuffle_2`` in tests/data/activations_real/pixelunshuffle) and the xmodel a ``fix``
after it. The deploy graph holds it NHWC too (the same implicit-op list) and ``xop_creator.py`` writes
it as the same XIR ``pixel-shuffle``, with ``upscale`` false. libxir's shape inference makes that
``[n, h/r, w/r, c*r*r]``, the inverse of the annotation's op: torch's ``PixelUnshuffle``, output
``[n, h, w, c*r*r + i*r + j]`` is input ``[n, h*r + i, w*r + j, c]``.

nndct's DPU partition (``pytorch_nndct/hardware/dpu_partition.py``) lists ``PIXEL_SHUFFLE`` and
``PIXEL_UNSHUFFLE`` among the types it converts to XIR with no filter and not CPU-only: the DPU takes
them on every target, as it takes their input.
"""
from typing import Any, Optional

import torch.nn.functional as F
from torch import nn

from .dpu_support import DPU, Verdict, cpu_verdict, follows
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import IN, OpDef, TO_NHWC, XirOp, attr, fail, one, op_input, req, unsupported
from .xmodel_support import XmodelForm

PIXEL_SHUFFLE = "nndct_pixel_shuffle"
PIXEL_UNSHUFFLE = "nndct_pixel_unshuffle"

# op type -> (its factor's name: the module attribute and the functional argument; XIR's upscale)
_FACTOR = {PIXEL_SHUFFLE: ("upscale_factor", True), PIXEL_UNSHUFFLE: ("downscale_factor", False)}


def _factor(mod: Optional[nn.Module], value: Any) -> int:
    """The scale factor: the module's (``upscale_factor`` / ``downscale_factor``), else the call's."""
    if mod is None:
        return int(value)
    return int(getattr(mod, "upscale_factor", None) or getattr(mod, "downscale_factor"))


def _onnx_pixel_shuffle(b: Any, node: Any, mod: Optional[nn.Module]) -> str:
    """DepthToSpace mode CRD (opset 13), torch's channel order (``out[n, c, h*r + i, w*r + j] =
    in[n, c*r*r + i*r + j, h, w]``): the same values, moved. 4-D NCHW only.

    Raises:
        Unsupported: an input of another rank (DepthToSpace takes 4-D)."""
    r = _factor(mod, None if mod is not None else b.static(arg(node, 1, "upscale_factor")))
    if len(b.shape(node.args[0])) != 4:
        raise Unsupported("pixel_shuffle of a %d-D input (ONNX DepthToSpace is 4-D)" % len(b.shape(node.args[0])))
    return b.op("DepthToSpace", [b.tensor(node.args[0])], node.name, blocksize=r, mode="CRD")


def _onnx_pixel_unshuffle(b: Any, node: Any, mod: Optional[nn.Module]) -> str:
    """Reshape ``[n, c, h/r, r, w/r, r]``, Transpose ``[0, 1, 3, 5, 2, 4]``, Reshape ``[n, c*r*r, h/r, w/r]``
    (torch's own ONNX symbolic of ``pixel_unshuffle``): torch's channel order, ``out[n, c*r*r + i*r + j, h,
    w] = in[n, c, h*r + i, w*r + j]``; the batch dimension is copied (Reshape's 0). Not SpaceToDepth: its
    output channel is ``(i*r + j)*C + c``, another order. 4-D NCHW only.

    Raises:
        Unsupported: an input of another rank."""
    r = _factor(mod, None if mod is not None else b.static(arg(node, 1, "downscale_factor")))
    shape = b.shape(node.args[0])
    if len(shape) != 4:
        raise Unsupported("pixel_unshuffle of a %d-D input (4-D NCHW only)" % len(shape))
    _, c, h, w = (int(d) for d in shape)
    split = b.op("Reshape", [b.tensor(node.args[0]), b.ints(node.name + "/split", [0, c, h // r, r, w // r, r])],
                 node.name + "/blocks")
    moved = b.op("Transpose", [split], node.name + "/moved", perm=[0, 1, 3, 5, 2, 4])
    return b.op("Reshape", [moved, b.ints(node.name + "/shape", [0, c * r * r, h // r, w // r])], node.name)


def dpu_pixel_shuffle(node: Any, ctx: Any) -> Verdict:
    """On the DPU with its input (nndct's DPU partition converts pixel shuffle and unshuffle with no filter,
    module docstring)."""
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return cpu_verdict("The input of %s is not on DPU." % node.op, fixes=[follows(src.name)])
    return Verdict(DPU)


def _lower_pixel_shuffle(lo, node) -> dict:
    """scale (the factor) and upscale: True for pixel shuffle, False for pixel unshuffle
    (``OpDispatcher.pixel_shuffle`` / ``pixel_unshuffle``).

    Raises:
        XmodelUnsupported: an input that is not 4-D (XIR's pixel-shuffle is NHWC)."""
    name, upscale = _FACTOR[node.op]
    m = lo.module(node)
    r = _factor(m, None if m is not None else lo.call_args(node)[name])
    x = lo.values.get(node.fx_node.args[0])
    if x is not None and x.dim() != 4:
        raise lo.unsupported(node, "%s of a %d-D input (XIR pixel-shuffle is NHWC)"
                             % ("pixel_shuffle" if upscale else "pixel_unshuffle", x.dim()))
    return {"scale": r, "upscale": upscale}


def _create_pixel_shuffle(w, node) -> None:
    """XIR ``pixel-shuffle {scale, upscale}`` on its input; a fix after it where the node has an output entry
    (pixel unshuffle; pixel shuffle has none: module docstring)."""
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
    """torch's ``pixel_shuffle`` (``upscale``, the annotation's op) or ``pixel_unshuffle`` (its inverse, the
    shape inference's ``[n, h/s, w/s, c*s*s]``) on the NCHW form of the NHWC input."""
    x, s = run.nchw(op, one(ins)), int(op.attr("scale"))
    y = F.pixel_shuffle(x, s) if op.attr("upscale") else F.pixel_unshuffle(x, s)
    return run.checked(op, y.permute(TO_NHWC))


RECORD = OpRecord(
    family="pixel_shuffle",
    specs={PIXEL_SHUFFLE: OpSpec("layout", False, True, True), PIXEL_UNSHUFFLE: OpSpec("layout", False, False, False)},
    modules={nn.PixelShuffle: PIXEL_SHUFFLE, nn.PixelUnshuffle: PIXEL_UNSHUFFLE},
    functions={F.pixel_shuffle: PIXEL_SHUFFLE, F.pixel_unshuffle: PIXEL_UNSHUFFLE},
    signatures={PIXEL_SHUFFLE: (("input", "upscale_factor"), {}),
                PIXEL_UNSHUFFLE: (("input", "downscale_factor"), {})},
    approximation=Absent("moves data only: the values are its input's"),
    source="nndct_shared/base/key_names.py (PIXEL_SHUFFLE, PIXEL_UNSHUFFLE); pytorch_nndct/parse/op_dispatcher.py "
           "(OpDispatcher.pixel_shuffle, pixel_unshuffle); nndct_shared/quantization/commander.py "
           "(SoftFusePixelShuffle); nndct_shared/nndct_graph/nndctgraph_holder.py (MULTIPLE_OUTPUTS_OPS); "
           "nndct_shared/compile/xop_creator.py; libxir built_in_ops.cpp, shape_inference.cpp (pixel-shuffle)",
    onnx={PIXEL_SHUFFLE: _onnx_pixel_shuffle, PIXEL_UNSHUFFLE: _onnx_pixel_unshuffle},
    dpu_rule={PIXEL_SHUFFLE: DpuRule(("pixel_shuffle",), dpu_pixel_shuffle),
              PIXEL_UNSHUFFLE: DpuRule(("pixel_unshuffle",), dpu_pixel_shuffle)},
    xmodel={PIXEL_SHUFFLE: XmodelForm(_lower_pixel_shuffle, _create_pixel_shuffle, nhwc=True),
            PIXEL_UNSHUFFLE: XmodelForm(_lower_pixel_shuffle, _create_pixel_shuffle, nhwc=True)},
    xir_ops={"pixel-shuffle": XirOp(OpDef("pixel-shuffle", IN, (req("scale", "int32"), req("upscale", "bool")),
                                          _shape_pixel_shuffle), _run_pixel_shuffle, "pixel_shuffle")},
    traced={PIXEL_SHUFFLE: ("pixel_shuffle",), PIXEL_UNSHUFFLE: ("pixel_unshuffle",)},
    refusals={},
    sim={PIXEL_SHUFFLE: TORCH, PIXEL_UNSHUFFLE: TORCH},
)
