"""``python -m pipeline compare REFERENCE BOARD [--xmodel FILE] [--json]``: the board's layer dumps against a
reference, tensor by tensor, and the first op where they part (docs/xmodel.md#board-dumps).

REFERENCE is a deploy-check folder (the real quantizer's, this project's ``export_xmodel(deploy_check=True)``
or ``xmodel run --dump``); BOARD is the board's dumps (VART's ``XLNX_ENABLE_DUMP=1`` folder, ``xdputil
run``'s outputs) or another deploy-check folder (``compare_load``). Tensors meet by their sanitised names.
Each node is compared as int8 codes when both sides have them; a float file is turned into codes with
the node's fix position (from ``--xmodel``, else read off the reference's own float and code files);
float files of unquantized nodes are compared as float32. Order: the xmodel's ops (a topological order)
when given, else ``shape.txt``'s. Exit status: 0 all match, 1 a divergence, 2 the input cannot be used (or
too few of the board's tensors pair with the reference's for a verdict: ``compare_pairing``).
"""
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pipeline.inspect.compare_fix import board_calibration, check_calibration, codes_agree, fp_from_files
from pipeline.inspect.compare_load import CompareError, DumpSet, load, stem
from pipeline.inspect.compare_pairing import pairing

MATCH, DIFFER, MISSING, SIZE, NOT_COMPARED = "match", "differ", "missing", "size", "not compared"
REORDERED = "reordered"


def _quantize(values: np.ndarray, fp: int, bits: int) -> Tuple[np.ndarray, bool]:
    """``(codes, on_grid)``: values on their grid give their exact codes; off-grid values (a value dumped
    before its fix) are rounded half up as the DPU's ``fix`` does, clamped to the code range."""
    scaled = values.astype(np.float64) * (2.0 ** fp)
    on_grid = bool(np.all(scaled == np.round(scaled)))
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(np.floor(scaled + 0.5), lo, hi).astype(np.int32), on_grid


def _diagnose(ref: np.ndarray, got: np.ndarray, shape: Optional[List[int]], bits: int) -> Optional[str]:
    """What a code difference looks like: the reference in NCHW order, or scaled by a power of two."""
    if shape is not None and len(shape) == 4 and int(np.prod(shape)) == ref.size:
        n, h, w, c = shape
        if np.array_equal(got, ref.reshape(n, h, w, c).transpose(0, 3, 1, 2).reshape(-1)):
            return ("the board's values are the reference's in NCHW order (channel-major): the tensor was "
                    "written or read as NCHW; the DPU's and XIR's layout is NHWC %s" % shape)
        if c > 1 and np.array_equal(got, ref.reshape(n, h, w, c)[..., ::-1].reshape(-1)):
            return ("the board's values are the reference's with the %d channels in reverse order (RGB fed as "
                    "BGR, or BGR as RGB): the channel order of the data fed differs from the reference's" % c)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    best = None  # type: Optional[Tuple[float, int]]
    for k in range(-7, 8):
        if k == 0:
            continue
        guess = np.clip(np.floor(ref * (2.0 ** k) + 0.5), lo, hi)
        share = float(np.mean(np.abs(guess - got) <= 1)) if got.size else 0.0
        if share >= 0.9 and np.any(got != 0) and (best is None or share > best[0]):
            best = (share, k)
    if best is not None:
        return ("the board's codes are the reference's times 2^%d (%.0f%% of them within 1): a fix position "
                "off by %+d (the board quantized with fix_pos reference%+d): the compiled xmodel or the data "
                "fed to it used another fix position" % (best[1], 100 * best[0], best[1], best[1]))
    return None


class _Ctx(object):
    def __init__(self, ref: DumpSet, board: DumpSet, graph: Any) -> None:
        self.ref, self.board, self.graph = ref, board, graph
        self.fixes = {}  # type: Dict[str, Tuple[int, int]]
        self.shapes = dict(ref.shapes)
        if graph is not None:
            from pipeline.inspect.deploy_dump import fix_position
            for op in graph.ops:
                if op.type != "fix":
                    found = fix_position(graph, op.name)
                    if found is not None:
                        self.fixes[stem(op.name)] = found
                    self.shapes.setdefault(stem(op.name), list(op.shape))

    def fix(self, node: str) -> Optional[Tuple[int, int]]:
        if node in self.fixes:
            return self.fixes[node]
        fp = fp_from_files(self.ref, node)
        if fp is None:
            fp = fp_from_files(self.board, node)
        return None if fp is None else (fp, 8)


def _codes_of(ctx: _Ctx, dump: DumpSet, node: str, notes: List[str]) -> Optional[np.ndarray]:
    fix = ctx.fix(node)
    if node in dump.floats and fix is not None:
        codes, on_grid = _quantize(dump.read(node, False), fix[0], fix[1])
        if not on_grid:
            agree = codes_agree(dump, node, fix[0], fix[1])
            if agree:  # its codes were made at this fix position from this float file: a value before its fix
                notes.append("%s: %s.bin holds the value before its output fix (the real quantizer dumps a "
                             "Hardswish so, and truncates it in its _fix.bin); read rounded half up at fix_pos %d, "
                             "as the DPU's fix rounds" % (dump.folder, node, fix[0]))
                return codes
            if node not in dump.codes:
                notes.append("%s: %s.bin's values are not on the grid of fix_pos %d (a value before its fix, or "
                             "another fix position than the one the folder was made with) and the folder has no "
                             "%s_fix.bin; read rounded half up at fix_pos %d" % (dump.folder, node, fix[0], node,
                                                                                 fix[0]))
                return codes
            notes.append("%s: %s_fix.bin was not made at fix_pos %d from %s.bin; its own codes are compared"
                         % (dump.folder, node, fix[0], node))
        elif node not in dump.codes:
            return codes
    if node in dump.codes:
        return dump.read(node, True)
    return None


def compare_node(ctx: _Ctx, node: str) -> Dict[str, Any]:
    """One node: ``{"node", "status", "kind" ("codes"/"float"), "elements", "differ", "max_diff", "fix_pos",
    "shape", "why", "notes"}``."""
    ref, board = ctx.ref, ctx.board
    fix = ctx.fix(node)
    row = {"node": node, "status": NOT_COMPARED, "kind": None, "elements": None, "differ": None, "max_diff": None,
           "fix_pos": fix[0] if fix else None, "shape": ctx.shapes.get(node), "why": None,
           "notes": []}  # type: Dict[str, Any]
    if node not in board.codes and node not in board.floats:
        row["status"] = MISSING
        return row
    a = _codes_of(ctx, ref, node, row["notes"])
    b = _codes_of(ctx, board, node, row["notes"])
    if a is not None and b is not None:
        row["kind"] = "codes"
    elif node in ref.floats and node in board.floats:
        a, b, row["kind"] = ref.read(node, False), board.read(node, False), "float"
    else:
        row["why"] = ("one side has codes, the other float values, and no fix position is known for it: pass "
                      "--xmodel FILE")
        return row
    row["elements"] = int(a.size)
    if a.size != b.size:
        row["status"] = SIZE
        four = " (4 bytes per element: float32 where codes were expected?)" if b.size == 4 * a.size else ""
        row["why"] = ("the board's file holds %d elements, the reference %d%s%s: another model's or another batch's "
                      "dump, or a truncated copy; copy the board's dump again, made with batch 1 from the same xmodel"
                      % (b.size, a.size, " (shape %s)" % row["shape"] if row["shape"] else "", four))
        return row
    if row["kind"] == "float":
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        row["differ"] = int(np.sum(~same))
        row["max_diff"] = float(np.nanmax(np.abs(a - b))) if row["differ"] else 0.0
        if row["differ"] and np.array_equal(np.sort(a), np.sort(b)):
            row["status"] = REORDERED
            row["why"] = ("the same values in another order: a flatten of a 4-D tensor is dumped in the model's "
                          "(NCHW) order by the quantizer and in NHWC order from the xmodel's reshape; a float "
                          "tensor (no fix), which the DPU does not dump; not counted as a divergence")
            return row
    else:
        diff = np.abs(a.astype(np.int64) - b.astype(np.int64))
        row["differ"], row["max_diff"] = int(np.count_nonzero(diff)), int(diff.max()) if diff.size else 0
        if row["differ"]:
            row["why"] = _diagnose(a, b, row["shape"], fix[1] if fix else 8)
    row["status"] = DIFFER if row["differ"] else MATCH
    return row


def _order(ctx: _Ctx) -> List[str]:
    """The nodes to compare in topological order: the xmodel's op order, else the reference's shape.txt
    (parameters, which it does not list, first), then what only the board has."""
    names = []  # type: List[str]
    if ctx.graph is not None:
        for op in ctx.graph.ops:
            if op.type == "fix":
                src = op.inputs.get("input", [None])[0]
                names.append(stem(src.name) if src is not None else stem(op.name))
            names.append(stem(op.name))
    params = sorted(n for n in set(ctx.ref.codes) | set(ctx.ref.floats) if n not in ctx.ref.shapes)
    names += params + ctx.ref.order + ctx.ref.nodes() + ctx.board.nodes()
    seen, out = set(), []
    for n in names:
        if n not in seen and (n in ctx.ref.codes or n in ctx.ref.floats or n in ctx.board.codes
                              or n in ctx.board.floats):
            seen.add(n)
            out.append(n)
    return out


def _parameter(dump: DumpSet, name: str) -> bool:
    """A parameter's file (a ``.bin`` that ``shape.txt`` does not list): on one side only, it is listed as such,
    never a divergence, whichever side lacks it (a float parameter the xmodel holds as a ``const`` without
    ``fix`` is dumped by one writer and not by another; a batch norm's mean and var the xmodel drops)."""
    return dump.full and name not in dump.shapes


def compare(reference: str, board: str, xmodel: Optional[str] = None) -> Dict[str, Any]:
    """Compare two dump folders.

    Returns:
        ``{"ok", "verdict", "reference", "board", "layouts", "rows" (per node, see :func:`compare_node`),
        "first" (the first diverging row with its ``explain``, or None), "board_only", "not_on_board",
        "notes"}``.

    Raises:
        CompareError: a folder that cannot be used, an xmodel that cannot be read or that has no op named as a
            tensor of REFERENCE (another model's), or nothing in common.
    """
    graph = None
    if xmodel is not None:
        graph = _read_xmodel(xmodel)
    ref, got = load(reference, "REFERENCE"), load(board, "BOARD")
    if not ref.full:
        raise CompareError("REFERENCE %s is a board dump (%s layout), not a deploy-check folder; give the "
                           "reference first: python -m pipeline compare REFERENCE BOARD" % (reference, ref.layout))
    ref_nodes, board_nodes = set(ref.nodes()), set(got.nodes())
    if graph is not None and not ref_nodes & {stem(op.name) for op in graph.ops}:
        raise CompareError("--xmodel %s describes another model: none of its %d ops (e.g. %s) is a tensor of "
                           "REFERENCE (e.g. %s); give the xmodel the reference was made from (the one the board ran)"
                           % (xmodel, len(graph.ops), ", ".join(stem(op.name) for op in graph.ops[:2]),
                              ", ".join(sorted(ref_nodes)[:2])))
    ctx = _Ctx(ref, got, graph)
    if graph is not None:
        check_calibration(ref, ctx.fixes, xmodel)
    common = ref_nodes & board_nodes
    if not common:
        raise CompareError("none of BOARD's %d tensors (e.g. %s) is in REFERENCE (e.g. %s): the dumps of another "
                           "model or another xmodel? Make the reference from the xmodel the board ran (python -m "
                           "pipeline xmodel run FILE --input X.npy --dump DIR)"
                           % (len(board_nodes), ", ".join(sorted(board_nodes)[:3]), ", ".join(sorted(ref_nodes)[:3])))
    rows, board_only = [], []
    for node in _order(ctx):
        if node not in ref_nodes:
            board_only.append(node)
            continue
        row = compare_node(ctx, node)
        if row["status"] != MISSING or (got.full and not _parameter(ref, node)):
            rows.append(row)
    missing_params = sorted(n for n in ref_nodes - board_nodes if _parameter(ref, n))
    not_on_board = sorted(n for n in ref_nodes if n not in board_nodes and (not got.full or n in missing_params))
    compared = [r for r in rows if r["status"] in (MATCH, DIFFER, SIZE, REORDERED)]
    if all(r["status"] == SIZE for r in compared):
        raise CompareError("every tensor BOARD and REFERENCE share has another size (%s: %s); %s"
                           % (compared[0]["node"], compared[0]["why"], "check that both come from one model, batch 1"))
    bad = [r for r in rows if r["status"] in (DIFFER, SIZE) or (r["status"] == MISSING and got.full)]
    first = None
    if bad:
        from pipeline.inspect.compare_explain import explain
        first = dict(bad[0])
        first["explain"] = explain(ctx, bad[0], {r["node"]: r for r in rows})
        if graph is not None:
            first["explain"]["lines"][:0] = board_calibration(got, ctx.fixes)
    notes = ref.notes + got.notes + sorted({n for r in rows for n in r["notes"]})
    report = {"reference": ref.folder, "board": got.folder, "layouts": [ref.layout, got.layout], "rows": rows,
              "first": first, "board_only": board_only, "not_on_board": not_on_board,
              "notes": notes, "xmodel": xmodel}
    ref_only = [n for n in ref.nodes() if n not in board_nodes and not _parameter(ref, n)]
    report["pairing"] = pairing(ref_only, board_only, len(compared))
    report["ok"] = first is None and report["pairing"]["complete"]
    report["exit"] = 0 if report["ok"] else (1 if first is not None else 2)
    report["verdict"] = _verdict(report, compared)
    return report


def _read_xmodel(path: str) -> Any:
    from pipeline.inspect.xmodel_check import check_file
    from pipeline.inspect.xmodel_file import load as load_file
    from pipeline.xir import reader
    report = check_file(path)
    if not report["ok"]:
        raise CompareError("--xmodel: %s" % report["verdict"])
    return reader.check(load_file(path)[1])


def _verdict(report: Dict[str, Any], compared: List[Dict[str, Any]]) -> str:
    first, pair = report["first"], report["pairing"]
    if not pair["complete"]:
        if first is None:
            return "UNPAIRED: %s; the %d paired match, the others are not compared" % (pair["why"], pair["paired"])
        what = ("%d of %d differ" % (first["differ"], first["elements"]) if first["status"] == DIFFER
                else first["status"])
        return ("DIVERGED: the board differs at %s (%s), but whether an op before it differs is not known: %s"
                % (first["node"], what, pair["why"]))
    if first is None:
        kinds = [r["kind"] for r in compared]
        reordered = sum(1 for r in compared if r["status"] == REORDERED)
        return "MATCH: all %d tensors match (%d as int8 codes, %d as float32)%s" % (
            len(compared), kinds.count("codes"), kinds.count("float"),
            "; %d float tensor%s in another element order (see below)" % (reordered, "" if reordered == 1 else "s")
            if reordered else "")
    return "DIVERGED: first divergence at %s" % first["explain"]["headline"]


def render(report: Dict[str, Any]) -> List[str]:
    """The text of a report: the verdict, the first divergence's explanation, a line per tensor."""
    lines = [report["verdict"]]
    if report["first"] is not None:
        lines += ["  " + line for line in report["first"]["explain"]["lines"]]
    lines.append("reference %s (%s), board %s (%s)%s" % (report["reference"], report["layouts"][0], report["board"],
                                                       report["layouts"][1],
                                                       ", order of " + report["xmodel"] if report["xmodel"] else ""))
    for r in report["rows"]:
        if r["status"] in (MATCH, DIFFER):
            unit = "codes" if r["kind"] == "codes" else "float32 values"
            lines.append("  %-7s %s: %d elements, %d %s differ, max %s%s" % (
                r["status"], r["node"], r["elements"], r["differ"], unit, r["max_diff"],
                ", fix_pos %s" % r["fix_pos"] if r["fix_pos"] is not None else ""))
        else:
            lines.append("  %-7s %s%s" % (r["status"], r["node"], ": " + r["why"] if r["why"] else ""))
    if report["not_on_board"]:
        lines.append("not dumped by the board (%d: merged into another op by the compiler, run on the CPU, or "
                     "parameters): %s" % (len(report["not_on_board"]), ", ".join(report["not_on_board"][:12])
                                          + (", ..." if len(report["not_on_board"]) > 12 else "")))
    if report["board_only"]:
        lines.append("only on the board (%d, not in the reference): %s" % (
            len(report["board_only"]), ", ".join(report["board_only"][:12])))
    lines += ["note: " + n for n in report["notes"]]
    return lines
