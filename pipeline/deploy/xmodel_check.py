"""The quantized xmodel the bundle carries, read back and checked before it goes in.

The bytes are the ones the bundle writes (read once and matched with the export step's sha256 by the
caller). ``check_quantized_xmodel`` parses them (``reader.read_xmodel``), checks the graph against
XIR's op definitions and shape inference (``reader.check``: every op, argument, attribute and output
dims, the topological order, the root subgraph), and compares it with what the bundle says of the
model: the graph is named after the file's model (``<Model>_int.xmodel`` holds graph ``<Model>``),
an input has the export example's shape (NHWC), and that input's fix op has the calibration's input
fix_pos. So it refuses a damaged file (truncated, emptied, most corruptions) and another model's or
another calibration's xmodel. What it cannot see, the sha256 does: a flipped bit inside a constant
(a weight) keeps a valid graph, and another xmodel of the same model, shape and input fix_pos (other
weights) passes every structural check.
"""
from typing import Any, Dict, List, Optional

from ..errors import ExportError, HandoffError

SUFFIX = "_int.xmodel"


def _input_fix_points(msg: Any, data_op: str) -> List[int]:
    from ..xir import schema
    out = []
    for node in msg.op_node:
        if node.op_type == "fix" and any(data_op in arg.arg_ops for arg in node.args) and "fix_point" in node.op_attr:
            out.append(int(schema.attr_python(node.op_attr["fix_point"])[1]))
    return out


def check_quantized_xmodel(data: bytes, name: str, input_shape: Optional[List[int]] = None,
                           input_fix_pos: Optional[int] = None, redo: str = "") -> Dict[str, Any]:
    """Check the quantized xmodel ``data`` (the file ``name``, e.g. ``export/DigitsCNN_int.xmodel``).

    Args:
        input_shape: the model input, NCHW (the export example's), or None: not compared.
        input_fix_pos: the calibration's input fix_pos, or None: not compared.
        redo: what to do, for the message.

    Returns:
        ``reader.describe``'s summary (graph, ops, op types, inputs, outputs).

    Raises:
        HandoffError: the bytes are not an xmodel, the graph breaks XIR's definitions, or it is not
            this model's (name, input shape, input fix_pos): every problem named.
    """
    from ..xir import reader
    try:
        msg = reader.read_xmodel(data)
        reader.check(msg)
    except ExportError as exc:
        raise HandoffError("deploy: %s does not pass the xmodel check, so the bundle does not carry it: %s. %s"
                           % (name, exc, redo))
    summary = reader.describe(msg)
    problems = []  # type: List[str]
    base = name.rsplit("/", 1)[-1]
    if base.endswith(SUFFIX) and summary["graph"] != base[:-len(SUFFIX)]:
        problems.append("its graph is %r, not %r: the xmodel of another model" % (summary["graph"],
                                                                                 base[:-len(SUFFIX)]))
    inputs = summary["inputs"]
    matching = inputs
    if input_shape is not None and len(input_shape) == 4:
        nhwc = [int(input_shape[0]), int(input_shape[2]), int(input_shape[3]), int(input_shape[1])]
        matching = [i for i in inputs if i["shape"] == nhwc]
        if not matching:
            problems.append("its input%s %s, not the model input %s (NHWC, the export example's shape)"
                            % (" is" if len(inputs) == 1 else "s are", " and ".join(str(i["shape"]) for i in inputs)
                               or "none", nhwc))
    if input_fix_pos is not None and matching:
        found = sorted({p for i in matching for p in _input_fix_points(msg, i["name"])})
        if found and int(input_fix_pos) not in found:
            problems.append("its input is quantized with fix_pos %s, the calibration's quant_info.json says %d: the "
                            "xmodel of another calibration" % (" or ".join(str(p) for p in found), int(input_fix_pos)))
    if problems:
        raise HandoffError("deploy: %s is not this model's quantized xmodel (%s), so the bundle does not carry it. %s"
                           % (name, "; ".join(problems), redo))
    return summary
