"""``python -m pipeline xmodel check FILE``: is this a sound quantized xmodel, and who wrote it?

Four groups of checks (docs/xmodel.md#check-and-run-any-xmodel):

- structure: the bytes parse as XIR's ``serial_v2.Graph`` (``xmodel_file.load``), ops have unique
  names, every argument names an op that comes earlier (so the graph is a DAG in ``op_node`` order),
  output tensors are float32 and named like their op, the root subgraph lists the ops;
- op definitions: every op type is one XIR defines (or a custom type, reported), arguments and
  attributes as XIR's op definitions say (``opdefs``), with their kinds;
- fix positions: every ``fix`` op carries ``fix_point``, ``bit_width``, ``if_signed``, ``round_mode``,
  ``bit_width`` in 1..32 and ``fix_point`` in the range the project accepts (``quant_info.FIX_POS_RANGE``);
  a ``const`` quantized by a ``fix`` holds values on that fix point's grid, within its bit width;
- shapes: every op's output dims re-inferred by XIR's shape inference (``shapes``) and compared.

The first, second and fourth are ``reader.check`` (its problems sorted into the groups); the fix
positions are checked here. :func:`check_file` returns a report; it raises nothing for a bad file.
"""
import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pipeline.errors import PipelineError
from pipeline.inspect.xmodel_file import COMPILED_TO_DO, TO_DO, CompiledXmodelError, XmodelFileError, load
from pipeline.quantizers.quant_info import FIX_POS_RANGE
from pipeline.xir import opdefs, reader, schema

GROUPS = ("structure", "op_definitions", "fix_positions", "shapes")
PROJECT, VITIS_AI, UNKNOWN = "this project", "Vitis AI quantizer", "unknown"
FIX_ATTRS = (("fix_point", "int32"), ("bit_width", "int32"), ("if_signed", "bool"), ("round_mode", "string"))


def _group(problem: str) -> str:
    """The group of one ``reader.check`` problem line."""
    if "shape inference" in problem:
        return "shapes"
    if "(fix)" in problem and ("bit_width" in problem or "round_mode" in problem):
        return "fix_positions"
    if ("names op" in problem or "names the op itself" in problem or "twice" in problem or "root subgraph" in problem
            or "output tensor" in problem or "has no name" in problem or "not in the file" in problem):
        return "structure"
    return "op_definitions"


def fix_attrs(node: Any) -> Dict[str, Any]:
    """A ``fix`` op's attributes as Python values (``fix_point``, ``bit_width``, ``if_signed``,
    ``round_mode``; those missing or of another kind left out)."""
    found = {}
    for key, kind in FIX_ATTRS:
        if key in node.op_attr:
            got_kind, value = schema.attr_python(node.op_attr[key])
            if got_kind == kind:
                found[key] = value
    return found


def _const_on_grid(const: Any, fix: Dict[str, Any]) -> Optional[str]:
    """Why a const's data is not on its fix op's grid, or None. Data as float32 little-endian."""
    kind, data = schema.attr_python(const.op_attr["data"]) if "data" in const.op_attr else (None, None)
    if kind != "bytes" or len(data) % 4:
        return None  # reported by reader.check
    values = np.frombuffer(data, dtype="<f4").astype(np.float64)
    if not values.size or not np.all(np.isfinite(values)):
        return "holds NaN or inf" if values.size else None
    codes = values * math.ldexp(1.0, fix["fix_point"])
    width, signed = fix["bit_width"], fix.get("if_signed", True)
    low, high = (-(2 ** (width - 1)), 2 ** (width - 1) - 1) if signed else (0, 2 ** width - 1)
    off = int(np.count_nonzero(codes != np.round(codes)))
    out = int(np.count_nonzero((codes < low) | (codes > high)))
    if not off and not out:
        return None
    return ("%d of %d values are not multiples of 2^-%d and %d lie outside the %s %d-bit range [%d, %d] x 2^-%d"
            % (off, values.size, fix["fix_point"], out, "signed" if signed else "unsigned", width, low, high,
               fix["fix_point"]))


def check_fix(msg: Any) -> List[str]:
    """The fix-position problems of a parsed xmodel, each naming its op (empty when none)."""
    problems = []  # type: List[str]
    nodes = {node.op_name: node for node in msg.op_node}
    for node in msg.op_node:
        if node.op_type != "fix":
            continue
        found = fix_attrs(node)
        missing = [k for k, _ in FIX_ATTRS if k not in found]
        if missing:
            problems.append("op %r (fix): %s missing or not of the kind XIR defines (%s)" % (
                node.op_name, ", ".join(missing), ", ".join("%s %s" % p for p in FIX_ATTRS if p[0] in missing)))
        point = found.get("fix_point")
        if point is not None and not FIX_POS_RANGE[0] <= point <= FIX_POS_RANGE[1]:
            problems.append("op %r (fix): fix_point %d is outside %d..%d (a real fix position keeps an 8-bit "
                            "tensor's scale 2^-fix_point near its values' range)" % (node.op_name, point,
                                                                                     FIX_POS_RANGE[0], FIX_POS_RANGE[1]))
            continue
        srcs = [s for arg in node.args for s in arg.arg_ops]
        src = nodes.get(srcs[0]) if len(srcs) == 1 else None
        if (src is not None and src.op_type == "const" and point is not None
                and 1 <= found.get("bit_width", 0) <= 32):
            why = _const_on_grid(src, found)
            if why:
                problems.append("op %r (const), quantized by %r with fix_point %d and bit_width %d: %s"
                                % (src.op_name, node.op_name, point, found["bit_width"], why))
    return problems


def origin(data: bytes, msg: Any) -> Tuple[str, str]:
    """Who wrote the file, as far as the bytes tell: ``(PROJECT | VITIS_AI | UNKNOWN, why)``.

    The project's writer builds the same graph as the real quantizer (same ops, names, attributes),
    so the graph cannot tell them apart; the serialization can. libxir (the real quantizer) stores
    attribute maps in no fixed order; the project stores every map in key order (``XGraph.serialize``).
    libxir writes its op catalogue ``op_defs`` (field 101) into every file; the project writes it only
    where libxir is installed (``xir.catalogue``), so it tells nothing.
    """
    ordered_maps = sum(1 for node in msg.op_node for m in (node.op_attr, node.output_tensor.tensor_attr) if len(m) > 1)
    if not ordered_maps:
        return UNKNOWN, ("%s and no attribute map of two or more entries: files of both writers look alike then"
                         % ("libxir's op_defs catalogue" if len(msg.op_defs) else "no op_defs"))
    try:
        same = msg.SerializeToString(deterministic=True) == data
    except Exception:  # a message protobuf cannot write back: not the project's writer
        same = False
    if same and len(msg.op_defs):
        return PROJECT, ("every attribute map in key order, as the project's writer stores them, with libxir's "
                         "op_defs catalogue (%d entries), as it writes it where libxir is installed" % len(msg.op_defs))
    if same:
        return PROJECT, "no op_defs and every attribute map in key order, as the project's writer stores them"
    if len(msg.op_defs):
        return VITIS_AI, ("it holds libxir's op_defs catalogue (%d entries) and attribute maps in libxir's order"
                          % len(msg.op_defs))
    return VITIS_AI, ("attribute maps in libxir's order and no op_defs: as libxir writes it with op_defs removed "
                      "(the stored real files in tests/data/golden_xmodel are stripped so) or re-written by a "
                      "tool that keeps the order")


def _summary_line(msg: Any) -> str:
    types = {}  # type: Dict[str, int]
    for node in msg.op_node:
        types[node.op_type] = types.get(node.op_type, 0) + 1
    return "graph %r, %d ops (%s)" % (msg.graph_name, len(msg.op_node),
                                     ", ".join("%s %d" % kv for kv in sorted(types.items())))


def check_file(path: str) -> Dict[str, Any]:
    """Check the file at ``path``; never raises for a bad file.

    Returns:
        ``{"file", "ok": bool, "verdict": one line, "origin": "this project" | "Vitis AI quantizer" |
        "unknown" | None, "origin_reason", "graph", "ops", "problems": {group: [str]} (groups in
        GROUPS), "notes": [str], "to_do": str or None}``. ``verdict`` starts with ``OK:``, ``BROKEN:``, or
        ``NOT CHECKED:`` for a compiled xmodel (what check does and does not check for it).
    """
    report = {"file": path, "ok": False, "verdict": "", "origin": None, "origin_reason": None, "graph": None,
              "ops": 0, "problems": {g: [] for g in GROUPS}, "notes": [], "to_do": None}  # type: Dict[str, Any]
    try:
        data, msg = load(path)
    except CompiledXmodelError as e:
        report["problems"]["structure"].append(str(e))
        report["verdict"] = ("NOT CHECKED: %s is a compiled xmodel (vai_c_xir's output: %s). xmodel check, "
                             "run and summary read the quantized xmodel, the compiler's input (check: its "
                             "structure, op definitions, fix positions and shapes); a compiled file's subgraphs, "
                             "DPU instructions and parameters are not checked, nor whether it was compiled from a "
                             "sound xmodel. To do: %s."
                             % (path, e.what, COMPILED_TO_DO))
        report["to_do"] = COMPILED_TO_DO
        return report
    except XmodelFileError as e:
        report["problems"]["structure"].append(str(e))
        report["verdict"] = "BROKEN: %s" % e
        report["to_do"] = TO_DO
        return report
    report.update(graph=msg.graph_name, ops=len(msg.op_node))
    try:
        reader.check(msg)
    except PipelineError as e:
        for line in str(e).split("\n- ")[1:]:
            report["problems"][_group(line)].append(line.strip())
    except Exception as e:  # a case the checker does not cover: said as such, never a traceback
        report["problems"]["structure"].append("the checker stopped on this file (%s: %s); the file is most "
                                               "likely damaged (report it if it loads in libxir)"
                                               % (type(e).__name__, str(e)[:200]))
    try:
        report["problems"]["fix_positions"].extend(check_fix(msg))
    except Exception as e:
        report["problems"]["fix_positions"].append("fix positions could not be checked (%s: %s)"
                                                   % (type(e).__name__, str(e)[:200]))
    custom = sorted({n.op_type for n in msg.op_node if opdefs.get(n.op_type) == opdefs.custom_def(n.op_type)}
                    if not any(report["problems"].values()) else set())
    if custom:
        report["notes"].append("custom op types (XIR does not define them; the quantizer writes float operators "
                               "so, and the compiler leaves them to the CPU): %s" % ", ".join(custom))
    who, why = origin(data, msg)
    report.update(origin=who, origin_reason=why)
    count = sum(len(v) for v in report["problems"].values())
    if not count:
        report["ok"] = True
        what = {PROJECT: "an xmodel written by this project",
                VITIS_AI: "an xmodel as the real Vitis AI quantizer writes it",
                UNKNOWN: "a sound quantized xmodel; which quantizer wrote it cannot be told"}[who]
        report["verdict"] = "OK: %s (%s)" % (what, _summary_line(msg))
        return report
    groups = [g for g in GROUPS if report["problems"][g]]
    first = report["problems"][groups[0]][0]
    report["to_do"] = ("the file was changed or damaged after export (or written by a tool that breaks XIR's "
                       "rules); the compiler would refuse or miscompile it: " + TO_DO)
    report["verdict"] = "BROKEN: %s: %d problem%s (%s); first: %s. To do: %s." % (
        path, count, "" if count == 1 else "s", ", ".join("%s %d" % (g.replace("_", " "), len(report["problems"][g]))
                                                         for g in groups), first, report["to_do"])
    return report
