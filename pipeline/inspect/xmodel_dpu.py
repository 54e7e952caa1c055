"""DPU or CPU for each op of a quantized xmodel, by the inspector's own rules (``rules.decide``).

The inspector's rules judge nodes of a traced torch model (:class:`trace.OpNode`: torch op names,
NCHW shapes, torch's attributes). Here each compute op of the xmodel is turned into such a node
(XIR's ``conv2d`` -> ``conv2d`` with ``kernel_size`` [h, w] from XIR's [w, h], NHWC dims -> NCHW, ...)
and judged by the same rules in the file's order, so the reasons are the inspector's.

What this can and cannot do (docs/xmodel.md#check-and-run-any-xmodel):

- ``fix`` ops are quantization, not compute: the compiler merges each into its producer (a
  ``*-fix`` op); they are transparent here (a consumer sees the fix's producer). ``const`` ops are
  parameters (weights, biases, shape values): no verdict. ``data`` ops are the graph's inputs.
- The macros nndct writes for one torch op (an average pool's ``avgpool2d`` + ``mul`` by a
  ``const`` scale; hard-swish's ``hard-sigmoid`` + ``mul`` by a ``const``) follow their first op.
- ``div`` and ``sub`` by a constant and custom op types are the quantizer's float operators: CPU.
- Op types with no rule are "unknown" (the inspector's verdict for them: CPU).
- The compiler's own partitioning (vai_c_xir) is not reproduced: this is the inspector's forecast,
  the same one ``python -m pipeline inspect`` gives for the torch model.
"""
from typing import Any, Dict, List, Optional, Tuple

from pipeline import ops
from pipeline.inspect.rules import decide
from pipeline.inspect.trace import OpNode
from pipeline.inspect.verdict import CPU, Context, Verdict

NOT_JUDGED = "-"
# XIR op type -> the op name the rules know it by: the op units' (``OpRecord.xir_ops``), and the XIR
# format's own types no unit writes (what files from the real quantizer or elsewhere carry)
_FORMAT_TYPES = {"hard-swish": "hswish", "swish": "silu", "flatten": "flatten", "squeeze": "squeeze",
                 "reduction_mean": "mean"}
_TYPES = dict(_FORMAT_TYPES)
_TYPES.update({type_: piece.inspected_as for type_, piece in ops.XIR_OPS.items()})
_FLOAT_OPERATORS = ("div", "sub", "neg")  # the CPU-only types of nndct's DPUPartition
_MACRO_HEADS = ("avgpool2d", "hard-sigmoid")


def _hw(pair: Any) -> List[int]:
    return [int(pair[1]), int(pair[0])] if pair is not None and len(pair) == 2 else [1, 1]


def _nchw(shape: Any) -> Tuple[int, ...]:
    dims = tuple(int(d) for d in shape)
    return (dims[0], dims[3], dims[1], dims[2]) if len(dims) == 4 else dims


def _attrs(op: Any, inputs: List[Any]) -> Dict[str, Any]:
    """The torch-like attributes the rules read, from the XIR op."""
    a = {"kernel_size": _hw(op.attr("kernel")), "stride": _hw(op.attr("stride")),
         "dilation": _hw(op.attr("dilation", [1, 1])), "pad": [int(p) for p in op.attr("pad", [0, 0, 0, 0])]}
    in_c = int(inputs[0].shape[-1]) if inputs and inputs[0].shape else 0
    out_c = int(op.shape[-1]) if op.shape else 0
    a.update(in_channels=in_c, out_channels=out_c, output_padding=[0, 0],
             groups=in_c if "depthwise" in op.type else int(op.attr("group", 1) or 1))
    if op.type == "leaky-relu":
        a["negative_slope"] = float(op.attr("alpha", 0.0))
    if op.type == "concat":
        axis = int(op.attr("axis", 0))
        a["dim"] = {0: 0, 1: 2, 2: 3, 3: 1}.get(axis % 4, axis) if len(op.shape) == 4 else axis
    if op.type == "transpose":
        a["order"] = list(op.attr("order", []))
    if op.type == "resize":
        a["mode"] = str(op.attr("mode", "NEAREST")).lower()
        a["align_corners"] = bool(op.attr("align_corners", False))
    if op.type == "reduction_mean":
        a["dim"] = [{1: 2, 2: 3, 3: 1}.get(int(d) % 4, int(d)) for d in op.attr("axis", [])]
    piece = ops.XIR_OPS.get(op.type)
    if piece is not None and piece.inspected_attrs is not None:  # what the unit's rule reads besides
        a.update(piece.inspected_attrs(op))
    return a


def _through_fix(op: Any) -> Any:
    while op.type == "fix" and op.inputs.get("input"):
        op = op.inputs["input"][0]
    return op


def verdicts(graph: Any, target: Any) -> List[Dict[str, Any]]:
    """Per op of ``graph`` (a checked XGraph), in the file's order: ``{"op", "type", "device": "DPU" |
    "CPU" | "-" (not judged: fix, const, data), "reasons": [str], "notes": [str]}``.

    Args:
        graph: ``reader.check``'s graph; target: a :class:`DpuTarget` with engine parameters.
    """
    nodes, consumers, rows = {}, {}, []  # type: Dict[str, OpNode], Dict[str, List[str]], List[Dict[str, Any]]
    ctx = Context(target, nodes, consumers, {})
    head_of = {}  # type: Dict[str, str]  # a macro's mul -> the op it belongs to
    for op in graph.ops:
        row = {"op": op.name, "type": op.type, "device": NOT_JUDGED, "reasons": [], "notes": []}
        rows.append(row)
        if op.type in ("fix", "const", "stack", "shape"):
            row["notes"].append({"fix": "quantization: merged into its producer by the compiler",
                                 "const": "a parameter (weights, bias or a shape value)"}.get(op.type, "shape helper"))
            continue
        feeds = [_through_fix(i) for i in op.input_list()]
        tensors = [i for i in feeds if i.type not in ("const", "stack", "shape")]
        if op.type == "data":
            nodes[op.name] = OpNode(op.name, "input", "data", [], _nchw(op.shape))
            consumers[op.name] = []
            row["notes"].append("a graph input")
            continue
        for i in tensors:
            consumers.setdefault(i.name, []).append(op.name)
        head = tensors[0] if len(tensors) == 1 and op.type == "mul" and tensors[0].type in _MACRO_HEADS else None
        if head is not None and head.name in ctx.verdicts:
            head_of[op.name] = head_of.get(head.name, head.name)
            ctx.verdicts[op.name] = ctx.verdicts[head.name]
            nodes[op.name] = OpNode(op.name, nodes[head.name].op, op.type, [head.name], _nchw(op.shape))
            consumers.setdefault(op.name, [])
            row.update(device=ctx.verdicts[op.name].device,
                       notes=["part of %s %r (the scale nndct writes with it)" % (head.type, head.name)])
            continue
        kind = "matmul" if op.type == "matmul" and len(tensors) > 1 else _TYPES.get(op.type, op.type)
        node = OpNode(op.name, kind, op.type, [i.name for i in tensors], _nchw(op.shape), _attrs(op, tensors),
                      float_operator=op.type in _FLOAT_OPERATORS or _is_custom(op.type))
        node.attrs["tensor_operands"] = len(tensors)
        nodes[op.name] = node
        consumers.setdefault(op.name, [])
        try:
            verdict = decide(node, ctx)
        except Exception as e:  # a rule meeting an attribute it does not expect: said, not raised
            verdict = Verdict(CPU, ["the inspector's rule for %s could not judge this op (%s: %s)"
                                    % (kind, type(e).__name__, e)])
        ctx.verdicts[op.name] = verdict
        row.update(device=verdict.device, reasons=list(verdict.reasons), notes=list(verdict.notes))
    return rows


def _is_custom(op_type: str) -> bool:
    from pipeline.xir.interp_ops import is_custom
    return is_custom(op_type)


def device_counts(rows: List[Dict[str, Any]]) -> Dict[str, int]:
    """How many ops :func:`verdicts` put on the DPU and on the CPU: ``{"DPU": n, "CPU": m}``."""
    return {d: sum(1 for r in rows if r["device"] == d) for d in ("DPU", "CPU")}


def first_cpu(rows: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The first op on the CPU, or None."""
    return next((r for r in rows if r["device"] == CPU), None)
