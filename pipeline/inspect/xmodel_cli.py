"""``python -m pipeline xmodel check|run|summary FILE``: any quantized xmodel, checked, run, summarized.

Exit status: 0 ok; 1 the file is broken or not an xmodel (the ``BROKEN:`` verdict says what, where
and what to do) or a compiled one (``NOT CHECKED:``); 2 the file is sound but cannot be done as asked (inputs that do not fit, an unknown
target, an op the interpreter cannot compute). Never a traceback for a bad file. ``--json`` prints one
JSON object on stdout instead of the text (docs/xmodel.md#check-and-run-any-xmodel).
"""
import argparse
import json
import sys
from typing import Any, Dict, List

from pipeline.errors import PipelineError

DEFAULT_TARGET_HELP = "a DPU target name, e.g. DPUCZDX8G_ISA1_B4096 (python -m pipeline targets lists them)"


def add_parser(sub: Any) -> None:
    """Add the ``xmodel`` command and its subcommands to ``sub`` (argparse subparsers)."""
    p = sub.add_parser("xmodel", help="check, run or summarize any quantized .xmodel (this project's or the real "
                                      "Vitis AI quantizer's)")
    cmds = p.add_subparsers(dest="xmodel_command", metavar="SUBCOMMAND")
    check = cmds.add_parser("check", help="structure, op definitions, fix positions, shapes: OK or BROKEN")
    run = cmds.add_parser("run", help="run the file on the CPU (the interpreter) on .npy inputs")
    summary = cmds.add_parser("summary", help="ops by type, inputs/outputs, fix positions, DPU/CPU for a target")
    for c in (check, run, summary):
        c.add_argument("file", metavar="FILE", help="the .xmodel file")
        c.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    run.add_argument("--input", "-i", action="append", default=[], metavar="X.npy", required=True,
                     help="a float .npy per data op, in model argument order: NCHW [1,C,H,W] as PyTorch gives "
                          "it, or NHWC [1,H,W,C] as the file has it; batch 1 (repeatable)")
    run.add_argument("--layout", choices=("auto", "nchw", "nhwc"), default="auto",
                     help="how 4-D inputs are laid out (auto: NCHW when both fit)")
    run.add_argument("--dump", metavar="DIR", help="write every tensor as the real quantizer's deploy-check dumps "
                                                    "(<name>.bin float32, <name>_fix.bin int8 codes, shape.txt; NHWC)")
    summary.add_argument("--target", help=DEFAULT_TARGET_HELP)


def _emit(args: argparse.Namespace, payload: Dict[str, Any], text: List[str], code: int) -> int:
    if args.json:
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        print("\n".join(text), file=sys.stdout if code == 0 or args.xmodel_command == "check" else sys.stderr)
    return code


def _checked(args: argparse.Namespace):
    """(report, msg, graph) of a sound file, or (report, None, None) after printing its BROKEN verdict."""
    from pipeline.inspect.xmodel_check import check_file
    from pipeline.inspect.xmodel_file import load
    from pipeline.xir import reader
    report = check_file(args.file)
    if not report["ok"]:
        return report, None, None
    _, msg = load(args.file)
    return report, msg, reader.check(msg)


def _check(args: argparse.Namespace) -> int:
    from pipeline.inspect.xmodel_check import GROUPS, check_file
    report = check_file(args.file)
    text = [report["verdict"]]
    if report["ok"]:
        text.append("  written by: %s (%s)" % (report["origin"], report["origin_reason"]))
    for group in GROUPS:
        for problem in report["problems"][group][1 if not report["ok"] and group == next(
                g for g in GROUPS if report["problems"][g]) else 0:][:20]:
            text.append("  %s: %s" % (group.replace("_", " "), problem))
    text += ["  note: %s" % n for n in report["notes"]]
    return _emit(args, report, text, 0 if report["ok"] else 1)


def _fail(args: argparse.Namespace, report: Dict[str, Any], code: int, message: str) -> int:
    return _emit(args, {"ok": False, "verdict": message, "check": report}, [message], code)


def _axes(o: Dict[str, Any]) -> str:
    """How a 4-D output's dims read: ``(NHWC; NCHW [..])``, ``(NCHW: the model's layout, after the file's
    transpose)``; nothing for other ranks."""
    if o["layout"] is None:
        return ""
    if o["layout"] == "NCHW":
        return " (NCHW: the model's layout, after the file's transpose; so in the dump)"
    return " (%s; NCHW %s)" % (o["layout"], o["model_shape"])


def _run(args: argparse.Namespace) -> int:
    from pipeline.inspect.xmodel_run import describe_value, layouts, run_file, write_dump
    from pipeline.inspect.xmodel_summary import fix_points
    report, msg, graph = _checked(args)
    if graph is None:
        return _fail(args, report, 1, report["verdict"])
    try:
        result = run_file(graph, args.input, args.layout)
    except PipelineError as e:
        return _fail(args, report, 2, "error: %s" % e)
    points = fix_points(msg)
    values = result["values"]
    axes = layouts(graph)
    outs = [describe_value(n, graph.get_op(n).type, values[n], points.get(n), axes.get(n, "NHWC"))
            for n in result["outputs"]]
    payload = {"ok": True, "file": args.file, "graph": msg.graph_name, "inputs": result["inputs"], "outputs": outs,
               "layout": "file's: a 4-D output's axes in its 'layout' (NHWC, or NCHW after a final transpose; "
                         "model_shape: the NCHW dims)", "dump": None}
    text = ["ran %s (graph %r, %d ops) on %s" % (args.file, msg.graph_name, len(graph.ops),
                                                 ", ".join("%s %s -> %s" % (i["file"], i["shape"], i["name"])
                                                           for i in result["inputs"]))]
    text += ["  warning: %s" % i["warning"] for i in result["inputs"] if i.get("warning")]
    for o in outs:
        text.append("  output %s (%s): dims %s%s, fix_pos %s, min %.6g max %.6g mean %.6g, argmax %s, first %s" % (
            o["name"], o["op"], o["shape"], _axes(o),
            o["fix_pos"], o["min"] if o["min"] is not None else float("nan"),
            o["max"] if o["max"] is not None else float("nan"), o["mean"] if o["mean"] is not None else float("nan"),
            o["argmax"], ["%.6g" % v for v in o["first"]]))
    if args.dump:
        try:
            payload["dump"] = write_dump(args.dump, graph, values)
        except OSError as e:
            return _fail(args, report, 2, "error: cannot write the dump to %s: %s" % (args.dump, e.strerror or e))
        except PipelineError as e:
            return _fail(args, report, 2, "error: cannot write the dump: %s" % e)
        d = payload["dump"]
        text.append("  dump: %d tensors and %d parameters (float32 .bin; int8 codes _fix.bin of %d tensors and %d "
                    "parameters) as deploy-check files in %s: the reference for python -m pipeline compare %s "
                    "BOARD_DUMP --xmodel %s" % (d["tensors"], d["parameters"], d["tensor_codes"], d["parameter_codes"],
                                               d["folder"], d["folder"], args.file))
    return _emit(args, payload, text, 0)


def _summary(args: argparse.Namespace) -> int:
    from pipeline.inspect.xmodel_summary import summarize
    target = None
    if args.target:
        from pipeline.targets import TARGETS, get_target
        try:
            target = get_target(args.target)
        except PipelineError as e:
            return _fail(args, {}, 2, "error: %s" % e)
        if target.engines is None:
            return _fail(args, {}, 2, "error: no engine parameters for %s; DPU/CPU can be told for %s" % (
                target.name, ", ".join(n for n, t in TARGETS.items() if t.engines is not None)))
    report, msg, graph = _checked(args)
    if graph is None:
        return _fail(args, report, 1, report["verdict"])
    s = summarize(msg, target, graph)
    s.update(ok=True, file=args.file, check=report["verdict"])
    text = ["%s: graph %r, %d ops" % (args.file, s["graph"], s["ops"]), "  " + report["verdict"],
            "ops by type: " + ", ".join("%s %d" % kv for kv in s["op_types"].items())]
    text += ["input  %s dims %s (%s) fix_pos %s" % (i["name"], i["shape"], i["layout"], i["fix_pos"])
             for i in s["inputs"]]
    text += ["output %s (%s) dims %s fix_pos %s" % (o["name"], o["type"], o["shape"], o["fix_pos"])
             for o in s["outputs"]]
    text.append("fix positions (%d quantized tensors):" % len(s["fix_positions"]))
    text += ["  %-4s %s (of %s %s, %s-bit %s, %s)" % (f["fix_pos"], f["op"], f["of_type"], f["of"], f["bit_width"],
                                                      "signed" if f["signed"] else "unsigned", f["round_mode"])
             for f in s["fix_positions"]]
    if target is not None:
        t = s["target"]
        text.append("on %s (the inspector's rules; the compiler decides in the end): %d ops on the DPU, %d on the "
                    "CPU" % (t["name"], t["DPU"], t["CPU"]))
        for row in t["ops"]:
            if row["device"] != "-":
                why = "; ".join(row["reasons"] or row["notes"])
                text.append("  %-3s %s (%s)%s" % (row["device"], row["op"], row["type"], ": " + why if why else ""))
    return _emit(args, s, text, 0)


def main(args: argparse.Namespace) -> int:
    """Run ``python -m pipeline xmodel SUBCOMMAND`` (parsed ``args``); returns the exit status."""
    if args.xmodel_command is None:
        print("usage: python -m pipeline xmodel {check,run,summary} FILE [...] (-h for help)", file=sys.stderr)
        return 2
    return {"check": _check, "run": _run, "summary": _summary}[args.xmodel_command](args)
