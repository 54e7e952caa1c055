"""``python -m pipeline compare REFERENCE BOARD [--xmodel FILE] [--json]`` (``compare.py``): exit 0 when every
shared tensor matches, 1 at a divergence (the first op named, with what it computes from), 2 when a folder
or the xmodel cannot be used (one paragraph: what came in, what was expected, what to do; no traceback), or
when too few of the board's tensors pair with the reference's for a verdict (UNPAIRED, the report printed)."""
import argparse
import json
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    """Add the ``compare`` command to ``sub`` (argparse subparsers)."""
    p = sub.add_parser("compare", help="compare a board's layer dumps with a deploy-check reference: per tensor, "
                                       "and the first diverging op")
    p.add_argument("reference", metavar="REFERENCE",
                   help="a deploy-check folder: export_xmodel(deploy_check=True)'s, or xmodel run FILE --dump DIR's")
    p.add_argument("board", metavar="BOARD", help="the board's dumps: VART's dump/ folder (XLNX_ENABLE_DUMP=1), "
                                                  "xdputil run's <batch>.<tensor>.bin, or a deploy-check folder")
    p.add_argument("--xmodel", metavar="FILE", help="the quantized .xmodel: op order, fix positions, op facts")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def main(args: argparse.Namespace) -> int:
    """Run ``python -m pipeline compare`` (parsed ``args``); returns the exit status."""
    from pipeline.errors import PipelineError
    from pipeline.inspect.compare import compare, render
    try:
        report = compare(args.reference, args.board, args.xmodel)
    except PipelineError as e:
        if args.json:
            print(json.dumps({"ok": False, "usable": False, "verdict": "error: %s" % e}, indent=2))
        else:
            print("error: %s" % e, file=sys.stderr)
        return 2
    except OSError as e:
        message = "error: cannot read %s: %s" % (getattr(e, "filename", None) or "a dump file", e.strerror or e)
        print(json.dumps({"ok": False, "usable": False, "verdict": message}) if args.json else message,
              file=sys.stdout if args.json else sys.stderr)
        return 2
    report["usable"] = True
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        print("\n".join(render(report)))
    return report["exit"]
