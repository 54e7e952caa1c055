"""Constant (zero) padding (``nndct_pad_nd``): ``nn.ZeroPad2d``, ``F.pad``."""
from typing import Any, Optional

import torch.nn.functional as F
from torch import nn

from .dpu_support import DPU, Verdict, cpu_verdict, follows
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import IN, OpDef, XirOp, attr, fail, one, op_input, opt, req
from .xmodel_support import XmodelForm

PAD = "nndct_pad_nd"


def _onnx_pad(b: Any, node: Any, mod: Optional[nn.ZeroPad2d]) -> str:
    """Constant padding (F.pad mode 'constant', nn.ZeroPad2d) as Pad; torch lists the last
    dimension first, ONNX every dimension's begins then ends."""
    if mod is not None:
        pad, value, mode = list(mod.padding), 0.0, "constant"
    else:
        pad = list(b.static(arg(node, 1, "pad")))
        mode = b.static(arg(node, 2, "mode", "constant"))
        value = b.static(arg(node, 3, "value", None))
    if mode != "constant":
        raise Unsupported("pad mode %r (only 'constant')" % mode)
    rank = len(b.shape(node.args[0]))
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    if min(begins + ends) < 0:
        raise Unsupported("negative padding")
    return b.op("Pad", [b.tensor(node.args[0]), b.ints(node.name + "/pads", begins + ends),
                        b.scalar(node.name + "/value", float(value or 0.0))], node.name, mode="constant")


def dpu_pad(node: Any, ctx: Any) -> Verdict:
    """Zero padding of a DPU feature map: the quantizer keeps it as a DPU pad (``nndct_pad_nd``)."""
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return cpu_verdict("The input of pad is not on DPU.", fixes=[follows(src.name)])
    return Verdict(DPU)


def _lower_pad(lo, node) -> dict:
    """pad_with (torch's pad list), mode CONSTANT and constant_values.

    Raises:
        XmodelUnsupported: a mode other than constant, a negative pad (a crop)."""
    m = lo.module(node)
    if m is not None:
        pad, mode, value = list(m.padding), "constant", float(m.value)
    else:
        a = lo.call_args(node)
        pad, mode, value = list(a["pad"]), a["mode"], a["value"]
    if mode != "constant":
        raise lo.unsupported(node, "pad mode %r (the xmodel writer folds constant pads)" % mode)
    if any(int(p) < 0 for p in pad):
        raise lo.unsupported(node, "negative padding %s (a crop): the DPU pads, it does not crop; slice the tensor "
                                   "instead (x[:, :, a:b, c:d])" % (list(pad),))
    return {"pad_with": [int(p) for p in pad], "mode": "CONSTANT", "constant_values": float(value or 0.0)}


def _create_pad(w, node) -> None:
    """XIR ``pad``: a pad the deploy graph could not fold into its consumer (``deploy._fuse_pads``)."""
    a = node.attrs
    w.fixed_op(node.name, "pad", {"paddings": a["pad_with"], "mode": a["mode"],
                                  "constant_values": a["constant_values"]}, {"input": w.data_inputs(node)})


def _shape_pad(op):
    """Each dim grown by its two ``paddings``."""
    dims, paddings = list(op_input(op).shape), attr(op, "paddings", "int32_vec")
    if len(paddings) != 2 * len(dims):
        raise fail(op, "paddings %s need 2 values per dim of input %s" % (paddings, dims))
    return [d + paddings[2 * i] + paddings[2 * i + 1] for i, d in enumerate(dims)], {}


def _run_pad(run, op, ins):
    """``F.pad`` with the CONSTANT value (one value for all dims)."""
    x, paddings = one(ins), list(op.attr("paddings"))
    if op.attr("mode") != "CONSTANT":
        raise run.error(op, "mode %r is not run (CONSTANT)" % op.attr("mode"))
    values = op.attr("constant_values") or [0.0]
    if len(set(values)) > 1:
        raise run.error(op, "per-dim constant_values %s are not run" % (values,))
    flat = []
    for d in reversed(range(x.dim())):  # F.pad lists the last dim first
        flat += [paddings[2 * d], paddings[2 * d + 1]]
    return F.pad(x, flat, value=float(values[0]))


RECORD = OpRecord(
    family="pad",
    specs={PAD: OpSpec("dpu", False, False, False)},
    modules={nn.ZeroPad2d: PAD},
    functions={F.pad: PAD},
    signatures={PAD: (("input", "pad", "mode", "value"), {"mode": "constant", "value": None})},
    approximation=Absent("writes the pad value's code"),
    source="nndct_shared/base/key_names.py",
    onnx={PAD: _onnx_pad},
    dpu_rule={PAD: DpuRule(("pad",), dpu_pad)},
    xmodel={PAD: XmodelForm(_lower_pad, _create_pad)},
    xir_ops={"pad": XirOp(OpDef("pad", IN, (req("paddings", "int32_vec"), req("mode", "string"),
                                          opt("constant_values", "float_vec", [])), _shape_pad), _run_pad, "pad")},
    traced={PAD: ("pad", "constant_pad_nd")},
    refusals={},
    sim={PAD: TORCH},
)
