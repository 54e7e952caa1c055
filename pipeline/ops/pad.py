"""Padding (``nndct_pad_nd``): ``nn.ZeroPad2d``, ``nn.ReflectionPad2d``, ``nn.ReplicationPad2d``, ``F.pad``
in the modes constant, reflect and replicate.

nndct's parser makes every ``aten::pad`` one ``nndct_pad_nd`` whatever its mode (``OpDispatcher.pad``;
torch 1.13 and 2.x trace these modules' ``F.pad`` as ``aten::pad``), so the three modules are one type
with the module's mode. Its XIR ``pad`` carries the mode as ``TorchPadNd.mode_map`` names it: constant
``CONSTANT``, reflect ``REFLECT``, replicate ``SYMMETRIC``. XIR's ``SYMMETRIC`` mirrors the edge row
in (libxir's ``pad`` op definition: ``[1, 2]`` padded by 1 before is ``[1, 1, 2]``), which is
replicate's value for a pad of 1 only: the real quantizer writes it for any replicate pad, and for a
pad over 1 its file computes other values than the model (the writer here refuses that form, saying
so; the interpreter runs XIR's ``SYMMETRIC`` as libxir defines it, so the verify step would catch it
too).
"""
from typing import Any, List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .dpu_support import DPU, Fix, Verdict, cpu_verdict, follows
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import IN, OpDef, XirOp, attr, fail, one, op_input, opt, req
from .xmodel_support import XmodelForm

PAD = "nndct_pad_nd"
# the pad modules and their mode (torch's ``F.pad`` mode each module's forward calls)
_MODULE_MODES = {nn.ZeroPad2d: "constant", nn.ReflectionPad2d: "reflect", nn.ReplicationPad2d: "replicate"}
# torch's mode -> XIR pad's (``pytorch_nndct/parse/torch_op_def.py``, ``TorchPadNd.mode_map``)
XIR_MODES = {"constant": "CONSTANT", "reflect": "REFLECT", "replicate": "SYMMETRIC"}
# torch's mode -> ONNX Pad's (opset 13: 'reflect' mirrors without the edge, as torch; 'edge' repeats it)
_ONNX_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def _call(mod: Optional[nn.Module], args: Any) -> Any:
    """(pad list, mode, value) of a pad module or of ``F.pad``'s arguments ``args(name, index, default)``."""
    if mod is not None:
        return list(mod.padding), _MODULE_MODES[type(mod)], float(getattr(mod, "value", 0.0))
    return list(args("pad", 1, Unsupported)), args("mode", 2, "constant"), args("value", 3, None)


def _onnx_pad(b: Any, node: Any, mod: Optional[nn.Module]) -> str:
    """A pad as ONNX Pad, exact in every mode torch and ONNX share (constant; reflect; replicate as
    'edge': the values are moved, not computed); torch lists the last dimension first, ONNX every
    dimension's begins then ends.

    Raises:
        Unsupported: a mode other than constant, reflect and replicate ('circular'), a negative pad."""
    pad, mode, value = _call(mod, lambda name, i, default: b.static(arg(node, i, name, default)))
    if mode not in _ONNX_MODES:
        raise Unsupported("pad mode %r (only 'constant', 'reflect', 'replicate')" % mode)
    rank = len(b.shape(node.args[0]))
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    if min(begins + ends) < 0:
        raise Unsupported("negative padding")
    return b.op("Pad", [b.tensor(node.args[0]), b.ints(node.name + "/pads", begins + ends),
                        b.scalar(node.name + "/value", float(value or 0.0))], node.name, mode=_ONNX_MODES[mode])


def _pad_attrs(mod: Optional[nn.Module], arg: Any) -> dict:
    """The inspector's pad attributes: ``mode`` (torch's) and ``pad`` (torch's list; a width the trace
    computes from sizes is None)."""
    if mod is not None:
        pad, mode, _ = _call(mod, None)
    else:
        pad, mode = arg(1, "pad", ()), arg(2, "mode", "constant")
        pad = list(pad) if isinstance(pad, (list, tuple)) else []
    return {"mode": mode, "pad": [int(p) if isinstance(p, int) else None for p in pad]}


def _xir_pad_attrs(op: Any) -> dict:
    """The inspector's pad attributes of an XIR pad: ``mode`` (XIR's, lower case: constant, reflect,
    symmetric) and ``pad`` (XIR's per-dim ``paddings``)."""
    return {"mode": str(op.attr("mode")).lower(), "pad": [int(p) for p in op.attr("paddings")]}


def dpu_pad(node: Any, ctx: Any) -> Verdict:
    """A pad of a DPU feature map: the quantizer keeps it as a DPU pad (``nndct_pad_nd``) in the modes the DPU
    pads in, CONSTANT and SYMMETRIC (nndct's ``dpu_op_filter.filter_pad``: "DPU only support CONSTANT or
    SYMMETRIC mode."); reflect goes to the CPU. A replicate pad over 1 is written SYMMETRIC by the real
    quantizer, which computes other values (module docstring): said, with the exact rewrite."""
    mode = node.attrs.get("mode", "constant")
    if mode == "reflect":
        fix = Fix("pad with nn.ReplicationPad2d(1) (XIR SYMMETRIC, which the DPU pads in) or zeros instead of "
                  "reflecting.", "nn.ReflectionPad2d(1) -> nn.ReplicationPad2d(1)", exact=False)
        return cpu_verdict("DPU only support CONSTANT or SYMMETRIC mode.", fixes=[fix])
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return cpu_verdict("The input of pad is not on DPU.", fixes=[follows(src.name)])
    if mode == "replicate" and max([p for p in node.attrs.get("pad", []) if p is not None] + [0]) > 1:
        return Verdict(DPU, notes=["a replicate pad of %s: the real quantizer writes it as XIR pad SYMMETRIC, which "
                                   "equals replicate for a pad of 1 only; the DPU computes other values (and this "
                                   "project's xmodel writer refuses it)" % (node.attrs["pad"],)],
                       fixes=[Fix("pad by 1 at a time: replicate of replicate is replicate (the same values).",
                                  "nn.ReplicationPad2d(2) -> nn.Sequential(nn.ReplicationPad2d(1), "
                                  "nn.ReplicationPad2d(1))")])
    return Verdict(DPU)


def _lower_pad(lo, node) -> dict:
    """pad_with (torch's pad list), mode (XIR's: CONSTANT, REFLECT, SYMMETRIC for replicate) and
    constant_values (0.0 in the non-constant modes, as nndct's ``OpDispatcher.pad`` sets it).

    Raises:
        XmodelUnsupported: a mode nndct does not parse as a pad ('circular'), a negative pad (a crop), a
            replicate pad over 1 (its XIR SYMMETRIC pad computes other values: module docstring)."""
    a = lo.call_args(node) if lo.module(node) is None else {}
    pad, mode, value = _call(lo.module(node), lambda name, i, default: a[name])
    if mode == "constant":
        if any(int(p) < 0 for p in pad):
            raise lo.unsupported(node, "negative padding %s (a crop): the DPU pads, it does not crop; slice the "
                                       "tensor instead (x[:, :, a:b, c:d])" % (list(pad),))
    elif mode not in XIR_MODES:
        raise lo.unsupported(node, "pad mode %r (nndct parses the modes constant, reflect and replicate as a pad)"
                             % mode)
    elif mode == "replicate" and max(int(p) for p in pad) > 1:
        raise lo.unsupported(node, "replicate pad %s: the real quantizer writes it as XIR pad mode SYMMETRIC, which "
                                   "mirrors the edge (a pad of 2 repeats the two edge rows in reverse order) and "
                                   "equals replicate for a pad of 1 only, so the file would compute other values "
                                   "than the model; pad by 1 at a time (F.pad(F.pad(x, (1, 1, 1, 1), "
                                   "mode='replicate'), ...)) or use reflect or zero padding" % (list(pad),))
    return {"pad_with": [int(p) for p in pad], "mode": XIR_MODES[mode], "constant_values": float(value or 0.0)}


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


def _mirror(n: int, before: int, after: int, edge: int) -> Optional[List[int]]:
    """The source index of each output position of one dim of size ``n`` padded by ``before`` and
    ``after``, mirrored at the border without the edge (``edge`` 0: REFLECT) or with it (1: SYMMETRIC);
    None where the pad reaches past the mirrored input (over ``n - 1 + edge``)."""
    if max(before, after) > n - 1 + edge:
        return None
    index = []
    for p in range(-before, n + after):
        index.append(-p - edge if p < 0 else (2 * n - 2 + edge - p if p >= n else p))
    return index


def _run_pad(run, op, ins):
    """``F.pad`` with the CONSTANT value (one value for all dims); REFLECT and SYMMETRIC as libxir's ``pad``
    op definition states them (TensorFlow's MirrorPad: mirrored without, or with, the edge), dim by dim."""
    x, paddings, mode = one(ins), list(op.attr("paddings")), op.attr("mode")
    if mode in ("REFLECT", "SYMMETRIC"):
        for d in range(x.dim()):
            if paddings[2 * d] or paddings[2 * d + 1]:
                index = _mirror(x.shape[d], paddings[2 * d], paddings[2 * d + 1], int(mode == "SYMMETRIC"))
                if index is None:
                    raise run.error(op, "%s paddings %s reach past dim %d of size %d"
                                    % (mode, paddings, d, x.shape[d]))
                x = torch.index_select(x, d, torch.tensor(index, dtype=torch.long))
        return x
    if mode != "CONSTANT":
        raise run.error(op, "mode %r is not run (CONSTANT, REFLECT, SYMMETRIC)" % mode)
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
    modules={m: PAD for m in _MODULE_MODES},
    functions={F.pad: PAD},
    signatures={PAD: (("input", "pad", "mode", "value"), {"mode": "constant", "value": None})},
    approximation=Absent("writes the pad value's code"),
    source="nndct_shared/base/key_names.py; pytorch_nndct/parse/op_dispatcher.py (OpDispatcher.pad), "
           "torch_op_def.py (TorchPadNd.mode_map); libxir built_in_ops.cpp (pad)",
    onnx={PAD: _onnx_pad},
    dpu_rule={PAD: DpuRule(("pad",), dpu_pad, attrs=_pad_attrs)},
    xmodel={PAD: XmodelForm(_lower_pad, _create_pad)},
    xir_ops={"pad": XirOp(OpDef("pad", IN, (req("paddings", "int32_vec"), req("mode", "string"),
                                          opt("constant_values", "float_vec", [])), _shape_pad), _run_pad, "pad",
                          _xir_pad_attrs)},
    traced={PAD: ("pad", "constant_pad_nd")},
    refusals={},
    sim={PAD: TORCH},
)
