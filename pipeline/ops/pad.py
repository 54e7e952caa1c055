"""Constant (zero) padding (``nndct_pad_nd``): ``nn.ZeroPad2d``, ``F.pad``."""
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .xir_support import IN, OpDef, XirOp, attr, fail, one, op_input, opt, req
from .xmodel_support import XmodelForm

PAD = "nndct_pad_nd"


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
    xmodel={PAD: XmodelForm(_lower_pad, _create_pad)},
    xir_ops={"pad": XirOp(OpDef("pad", IN, (req("paddings", "int32_vec"), req("mode", "string"),
                                          opt("constant_values", "float_vec", [])), _shape_pad), _run_pad, "pad")},
    traced={PAD: ("pad", "constant_pad_nd")},
)
