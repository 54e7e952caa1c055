"""What the first diverging op of ``python -m pipeline compare`` computes from: its inputs (and whether they
matched), its fix positions (input, weights, bias, output) with the DPU's shifts, and the DPU approximation
the op stands for (average-pool factor, LeakyReLU 26/256, hard-sigmoid 2731/16384 and Hardswish's Q7),
taken from the project's own constants (the op records: ``ops/pool.py``, ``ops/leaky_relu.py``, ``ops/hard_sigmoid.py``)."""
import re
from typing import Any, Dict, List, Optional

from pipeline.inspect.compare_load import stem

CONV_TYPES = ("conv2d", "depthwise-conv2d", "transposed-conv2d", "matmul")
INPUT_HINT = ("the first divergence is the model's input %s: the board ran on other input codes than the "
              "reference's, so every op after it differs too: check the board's preprocessing (channel order "
              "RGB/BGR, mean and scale, layout NHWC vs NCHW, the image itself), or feed the board the reference's "
              "own input codes, %s_fix.bin (xdputil run FILE <that file>)")


def _find_op(graph: Any, node: str) -> Optional[Any]:
    for op in graph.ops:
        if stem(op.name) == node and op.type != "fix":
            return op
    for op in graph.ops:
        if stem(op.name) == node:
            return op
    return None


def _through_fix(op: Any) -> Any:
    while op.type == "fix" and op.inputs.get("input"):
        op = op.inputs["input"][0]
    return op


def _fix_point(op: Any) -> Optional[int]:
    return int(op.attr("fix_point")) if op.type == "fix" and op.attr("fix_point") is not None else None


def _status(rows: Dict[str, Dict[str, Any]], node: str) -> str:
    row = rows.get(node)
    if row is None:
        return "not in the dumps"
    if row["status"] == "match":
        return "matches"
    if row["status"] == "differ":
        return "DIFFERS (%d of %d)" % (row["differ"], row["elements"])
    return row["status"]


def approximation(graph: Any, op: Any) -> Optional[str]:
    """The DPU approximation ``op`` carries, in words with its constants, or None."""
    from pipeline.ops.hard_sigmoid import HARD_SIGMOID_SCALE, HSWISH_FIX_POS
    from pipeline.ops.leaky_relu import LEAKY_SLOPE
    from pipeline.ops.pool import avgpool_dpu_scale
    parts = [_through_fix(i) for i in op.input_list()]
    pool = op if op.type == "avgpool2d" else next((p for p in parts if p.type == "avgpool2d"), None)
    if pool is not None:
        kernel = pool.attr("kernel") or [0, 0]  # XIR: [w, h]
        kw, kh = int(kernel[0]), int(kernel[1])
        factor = [float(p.data().reshape(-1)[0]) for p in parts if p.type == "const" and p.data().size == 1]
        return ("average pool %dx%d: the DPU divides by %d as a multiply, so nndct scales the mean by %r "
                "(avgpool_dpu_scale)%s" % (kh, kw, kh * kw, avgpool_dpu_scale(kh, kw),
                                           "; the file's factor const is %r" % factor[0] if factor else ""))
    if op.type == "leaky-relu":
        alpha = op.attr("alpha")
        return ("LeakyReLU: the DPU's slope is 26/256 = %r (LEAKY_SLOPE); the file's alpha is %r%s"
                % (LEAKY_SLOPE, alpha, "" if alpha == LEAKY_SLOPE else ": NOT the DPU's slope"))
    sig = op if op.type == "hard-sigmoid" else None
    for p in parts:
        if p.type == "hard-sigmoid":
            sig = p
        for q in (_through_fix(x) for x in p.input_list()):
            if q.type == "hard-sigmoid":
                sig = q
    if sig is not None:
        return ("hard-sigmoid: relu6(x + 3) * 2731/16384 (HARD_SIGMOID_SCALE = %r); in a Hardswish, x * Q(that) "
                "with Q a half-up fix at fix_pos %d (HSWISH_FIX_POS), 8 bits. The real quantizer's deploy-check "
                "float file of a Hardswish holds its value before the output fix and its _fix.bin truncates it "
                "(up to 1 code below the DPU's rounding); compare reads such a float file rounded half up"
                % (HARD_SIGMOID_SCALE, HSWISH_FIX_POS))
    return None


def fix_positions_line(fixes: Dict[str, Optional[int]]) -> str:
    """``fix positions: input 4, weights 7, output unknown (no fix op in the xmodel)``: an unknown position
    (None) said in words, never as ``None``."""
    return "fix positions: " + ", ".join("%s %s" % (k, "unknown (no fix op in the xmodel)" if v is None else v)
                                         for k, v in fixes.items())


def explain(ctx: Any, row: Dict[str, Any], rows: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The first divergence, explained: ``{"headline", "lines", "op", "type", "inputs", "fix_positions",
    "approximation"}`` (the op's facts only with ``--xmodel``)."""
    node, graph = row["node"], ctx.graph
    if row["status"] == "missing":
        what = "missing on the board side (the board's folder is a full deploy-check dump that lacks it)"
    elif row["status"] == "size":
        what = "wrong size: %s" % row["why"]
    else:
        unit = "codes" if row["kind"] == "codes" else "float32 values"
        what = "%d of %d %s differ, max %s" % (row["differ"], row["elements"], unit, row["max_diff"])
    out = {"op": node, "type": None, "inputs": [], "fix_positions": {}, "approximation": None,
           "lines": []}  # type: Dict[str, Any]
    lines = []  # type: List[str]
    if row.get("why") and row["status"] == "differ":
        lines.append("looks like: %s" % row["why"])
    op = _find_op(graph, node) if graph is not None else None
    if op is None:
        shape = row.get("shape")
        out["headline"] = "op %s: %s" % (node, what)
        if graph is None and row["status"] == "differ" and re.search(r"__input_\d+$", node):
            lines.append(INPUT_HINT % (node, node))
        lines.append("shape %s; pass --xmodel FILE (the xmodel the board ran, or the quantizer's) for its inputs, "
                     "fix positions and DPU approximation" % shape if graph is None else
                     "%s is not an op of the xmodel given: is it the xmodel the dumps came from?" % node)
        out["lines"] = lines
        return out
    out["type"] = op.type
    fixes = out["fix_positions"]
    inputs = []
    for arg in sorted(op.inputs):
        for src in op.inputs[arg]:
            producer = _through_fix(src)
            fp = _fix_point(src)
            if producer.type == "const":
                kind = "weights" if arg in ("weights", "input") and len(producer.shape) > 1 else (
                    "bias" if arg == "bias" else "const")
                if arg == "input" and op.type == "matmul" and len(producer.shape) > 1:
                    kind = "weights"
                fixes.setdefault(kind, fp)
            else:
                kind = "input"
                fixes.setdefault("input", fp)
            status = _status(rows, stem(producer.name))
            inputs.append({"arg": arg, "name": stem(producer.name), "type": producer.type, "kind": kind,
                           "fix_pos": fp, "status": status})
    own_fix = next((o for o in graph.ops if o.type == "fix" and o.inputs.get("input")
                    and o.inputs["input"][0] is op), None)
    fixes["output"] = _fix_point(own_fix) if own_fix is not None else None
    out["inputs"] = inputs
    data_inputs = [i for i in inputs if i["kind"] == "input"]
    said = "; ".join("its input %s %s" % (i["name"], i["status"]) for i in data_inputs) or "no data input"
    if op.type == "const" and row["status"] == "differ":
        said = "a parameter: the board's xmodel holds other parameters than the reference's"
        lines.append("a parameter differs: the board ran another xmodel than the reference's (another calibration, "
                     "or a model trained or edited since): make the reference from the xmodel the board runs, or "
                     "run the reference's xmodel on the board")
    if op.type == "data" and row["status"] == "differ":
        said = "the model's input: the board was fed other input codes than the reference's"
        lines.append(INPUT_HINT % (node, node))
    out["headline"] = "op %s (%s): %s; %s" % (node, op.type, what, said)
    for i in inputs:
        lines.append("%-7s %s (%s)%s: %s" % (i["kind"], i["name"], i["type"],
                                             ", fix_pos %s" % i["fix_pos"] if i["fix_pos"] is not None else "",
                                             i["status"]))
    lines.append(fix_positions_line(fixes))
    if op.type in CONV_TYPES and None not in (fixes.get("input"), fixes.get("weights"), fixes.get("output")):
        shift = fixes["input"] + fixes["weights"] - fixes["output"]
        text = "DPU shifts: output shift (input + weights - output) = %d" % shift
        if fixes.get("bias") is not None:
            text += ", bias shift (input + weights - bias) = %d" % (fixes["input"] + fixes["weights"] - fixes["bias"])
        lines.append(text)
    if data_inputs and all(i["status"] == "matches" for i in data_inputs) and row["status"] == "differ":
        lines.append("its inputs match, so the difference arises in this op: its arithmetic on the DPU, its "
                     "parameters as compiled, or its fix positions")
    approx = approximation(graph, op)
    if approx:
        out["approximation"] = approx
        lines.append("DPU approximation: " + approx)
    out["lines"] = lines
    return out
