"""Command line: ``python -m pipeline <command>`` and ``scripts/run_pipeline.py``.

Commands:
    run        run the steps of a config (the default command: ``python -m pipeline CONFIG``)
    inspect    which nodes of the float model run on the DPU for the configured target, and why not
    targets    the DPU target registry, fingerprints in hex
    check-env  what is installed here and which steps can run
    status     the state of a run folder: running (pid, step), ok, failed or interrupted (also after a kill),
               the times and what to do next; ``--json`` prints status.json's content instead
    schema     the config's JSON Schema, for editor completion
    xmodel     any quantized .xmodel: ``check FILE`` (OK or BROKEN), ``run FILE --input X.npy [--dump DIR]``,
               ``summary FILE [--target NAME]`` (``pipeline/inspect/xmodel_cli.py``; exit 0 ok, 1 broken, 2 cannot)
    compare    a board's layer dumps against a deploy-check reference: ``compare REFERENCE BOARD [--xmodel FILE]``
               (``pipeline/inspect/compare_cli.py``; exit 0 match, 1 divergence, 2 unusable input)

``run`` and ``inspect`` (a step with ``Step.command``: run alone through the driver) take the config as ``CONFIG`` or ``--config CONFIG``. ``-q`` hides the
progress messages; the final summary is always printed. Every deliberate failure (``PipelineError``)
prints one ``error:`` message and exits with status 2.
"""
import argparse
import gc
import json
import logging
import os
import sys
from typing import List, Optional

from .steps import DEFAULT_STEPS, NAMES as STEPS, ORDER, selected
from .errors import ConfigError, PipelineError

STEP_COMMANDS = {s.name: s for s in ORDER if s.command}  # steps that are also a command of their own
COMMANDS = ("run",) + tuple(STEP_COMMANDS) + ("status", "targets", "check-env", "schema", "xmodel", "compare")


def _steps(text: str) -> List[str]:
    steps = [s.strip() for s in text.split(",") if s.strip()]
    try:
        return selected(steps or [text])
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline",
        description="From a trained PyTorch model to a Vitis AI DPU deploy bundle. One YAML config describes a run: "
                    "source -> zero-copy preprocessing -> calib -> test -> export -> compile -> deploy bundle.",
        epilog="Without a command, 'run' is assumed: python -m pipeline configs/digits_sim_zcu102.yaml")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add_config_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("config_pos", nargs="?", metavar="CONFIG", help="YAML config file")
        p.add_argument("--config", "-c", help="YAML config file (instead of the positional CONFIG)")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config value by dotted path, e.g. --set run.work_dir=/tmp/run (repeatable)")
        p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
        p.add_argument("-q", "--quiet", action="store_true",
                       help="hide the progress messages (warnings, errors and the final summary remain)")

    p_run = sub.add_parser("run", help="run the steps of a config (default: %s)" % ",".join(DEFAULT_STEPS))
    add_config_args(p_run)
    p_run.add_argument("--steps", type=_steps, default=list(DEFAULT_STEPS),
                       help="comma-separated subset of %s, or 'all' (default: %s)"
                            % (",".join(STEPS), ",".join(DEFAULT_STEPS)))
    for step in STEP_COMMANDS.values():
        add_config_args(sub.add_parser(step.name, help=step.command))
    p_status = sub.add_parser("status", help="the state of a run folder (a killed run shows as interrupted)")
    p_status.add_argument("work_dir", metavar="RUN_DIR", help="the run folder (run.work_dir)")
    p_status.add_argument("--json", action="store_true",
                          help="print the status as JSON (status.json's content, a killed run shown as interrupted)")
    sub.add_parser("targets", help="list the DPU targets with their fingerprints")
    env_cmd = sub.add_parser("check-env", help="what is installed and which steps can run here (each step probed on "
                                               "a tiny model)")
    env_cmd.add_argument("--no-probe", action="store_true",
                         help="judge the steps by their installed packages alone (faster, and says less)")
    sub.add_parser("schema", help="print the config JSON Schema")
    from .inspect.xmodel_cli import add_parser as add_xmodel_parser
    add_xmodel_parser(sub)
    from .inspect.compare_cli import add_parser as add_compare_parser
    add_compare_parser(sub)
    return parser


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.DEBUG if getattr(args, "verbose", False) else (
        logging.WARNING if getattr(args, "quiet", False) else logging.INFO)
    logging.basicConfig(level=level, format="%(levelname)s %(message)s", stream=sys.stderr)


def _config_path(args: argparse.Namespace) -> str:
    """The config given as CONFIG or as --config CONFIG (exactly one of them)."""
    if (args.config is None) == (args.config_pos is None):
        raise ConfigError("%s: give the config once, as CONFIG or as --config CONFIG, e.g. python -m pipeline %s "
                          "configs/digits_sim_zcu102.yaml" % (args.command, args.command))
    return args.config or args.config_pos


def _run(args: argparse.Namespace) -> int:
    # The modules, classes and functions of torch's import (over a million objects) live until the
    # process exits: import them with the cyclic collector paused (its full collections would walk
    # them three times), then move them out of its reach, so that each collection during the run
    # walks only the run's own objects (0.2-0.3 s of a digits run, more under load).
    gc.disable()
    try:
        from .config import load_config
        from .runner.driver import run_steps
    finally:
        gc.freeze()
        gc.enable()
    loaded = load_config(_config_path(args), args.overrides)
    report = run_steps(loaded, args.steps)
    from .runner.report import render_summary
    from .runner.status import is_step_child
    # under torchrun only rank 0 reports, and a step's child process leaves it to the run; -q hides
    # the progress, not this summary, whose paths are shown against the run folder as the user names it
    if report and not is_step_child(loaded.work_dir):
        print("\n".join(render_summary(report, shown_path(loaded.work_dir))))
    return 0


def shown_path(path: str) -> str:
    """``path`` as the command line shows it: relative to the current folder when it lies below it
    (``runs/digits_sim_zcu102``), else absolute."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel == ".." or rel.startswith(".." + os.sep) else rel


def _step_command(args: argparse.Namespace) -> int:
    """A step that is a command of its own: run it alone through the driver (pre-flight, the run
    folder's lock, status.json, the report), then print its own summary lines."""
    from .config import load_config
    from .runner.driver import run_steps
    step = STEP_COMMANDS[args.command]
    loaded = load_config(_config_path(args), args.overrides)
    report = run_steps(loaded, [step.name])
    if report:  # under torchrun only rank 0 reports, as for run
        print("\n".join(step.result.from_json(report["steps"][step.name]).summary_lines(shown_path(loaded.work_dir))))
    return 0


def _status(args: argparse.Namespace) -> int:
    """``python -m pipeline status RUN_DIR [--json]``: a run folder's state for people (or as JSON)."""
    from .runmark import MARK_FILE
    from .runner.state import check_owned
    from .runner.status import format_status, read_status
    folder = args.work_dir
    if not os.path.isdir(folder) or not os.path.exists(os.path.join(folder, MARK_FILE)):
        what = ("does not exist" if not os.path.exists(folder) else "is not a folder" if not os.path.isdir(folder)
                else "has no %s mark, which the pipeline leaves in every folder it runs in" % MARK_FILE)
        raise PipelineError("%s %s: not a run folder (give the folder of run.work_dir, e.g. runs/<run.name>)"
                            % (folder, what))
    check_owned(folder)  # the mark is the pipeline's, each state file is a file
    status = read_status(folder, strict=True)
    print(json.dumps(status, indent=2, sort_keys=True) if args.json else format_status(shown_path(folder), status))
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["run"] + argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    _setup_logging(args)
    try:
        if args.command == "run":
            code = _run(args)
            # Whatever is alive now lives until the process exits: move it out of the collector's
            # reach, so the interpreter's final collections do not walk torch's objects (about a
            # second of exit time, more on a loaded machine). Objects are still finalized as usual.
            gc.freeze()
            return code
        if args.command in STEP_COMMANDS:
            return _step_command(args)
        if args.command == "status":
            return _status(args)
        if args.command == "xmodel":
            from .inspect.xmodel_cli import main as xmodel_main
            return xmodel_main(args)
        if args.command == "compare":
            from .inspect.compare_cli import main as compare_main
            return compare_main(args)
        if args.command == "targets":
            from .targets import format_targets
            print(format_targets())
        elif args.command == "check-env":
            from .env import check_env, format_env
            print(format_env(check_env(probe=not args.no_probe)))
        elif args.command == "schema":
            from .config import config_schema
            print(json.dumps(config_schema(), indent=2))
        return 0
    except PipelineError as exc:
        kind = "config error" if isinstance(exc, ConfigError) else "error"
        if os.environ.get("WORLD_SIZE", "1") not in ("", "1"):  # under torchrun: say which rank speaks
            kind += " (rank %s)" % os.environ.get("RANK", "?")
        print("%s: %s" % (kind, exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing under a final file name is half-written; run the same command again "
              "to redo the interrupted step", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`python -m pipeline schema | head`): stop quietly, like cat does; stdout
        # is pointed at /dev/null so that the interpreter's final flush does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command ended by a closed pipe
    except OSError as exc:
        from .fileio import STORAGE_ERRNOS
        if exc.errno not in STORAGE_ERRNOS:
            return internal_error(exc)
        print("error: cannot write %s: %s; free space or choose a writable folder (--set run.work_dir=...), then "
              "run again" % (exc.filename or "a file", exc.strerror or exc), file=sys.stderr)
        return 2
    except Exception as exc:
        return internal_error(exc)


def internal_error(exc: BaseException) -> int:
    """Report an exception a step of a run raised that is no PipelineError (``runner.driver.mark_internal``
    named the step): one ``error:`` line that names the step and says it is a bug to report, the traceback
    written to ``<work_dir>/steps/<step>.internal_error.txt``; exit code 2, as for any error. An exception
    outside a step (no step noted) is raised on, its traceback printed by Python as before."""
    import traceback
    step = getattr(exc, "pipeline_step", None)
    if step is None:
        raise exc
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    where = os.path.join(exc.pipeline_work_dir, "steps", "%s.internal_error.txt" % step)
    try:
        from . import fileio
        fileio.write_text(where, text)
        told = "its traceback is in %s" % where
    except OSError:
        told = "its traceback follows"
        print(text, file=sys.stderr, end="")
    print("error: step %s stopped on an internal error (%s: %s); this is a bug of the pipeline, please report it "
          "with the model: %s" % (step, type(exc).__name__, exc, told), file=sys.stderr)
    return 2
