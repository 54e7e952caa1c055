"""The drop-in's messages on the console, shown the way the real quantizer shows its ``[VAIQ_NOTE]`` lines.

pytorch_nndct prints its notes (``=>Exporting quant config.(quantize_result/quant_info.json)``, the
fast finetune's phases) through the logger ``nndct_screen`` at level INFO, with a stream handler of its
own on stderr (stdout in an interactive session) unless the root logger already has a handler, each
prefixed ``[VAIQ_NOTE]: ``, ``[VAIQ_WARN]: `` or ``[VAIQ_ERROR]: `` (docs/quantizer.md#messages). So
a script sees them without configuring logging, where Python's default (WARNING, no handler) would
hide an INFO record.

The drop-in does the same with the logger ``pipeline.apis``, the parent of its modules' loggers:
``install()`` (run when ``pipeline.apis`` is imported) gives it the level INFO unless the user set one,
and a handler that prints a record on stderr (stdout when Python runs interactively) with the real
prefix, unless a handler above it will print it (a script that configured logging gets the notes
through its own handlers, once). To silence the notes::

    logging.getLogger("pipeline.apis").setLevel(logging.WARNING)   # or ERROR: warnings too

Nothing here touches the ``pipeline`` logger of the command line and the steps.
"""
import logging
import sys
from typing import Any

LOGGER_NAME = "pipeline.apis"
PREFIXES = ((logging.ERROR, "[VAIQ_ERROR]: "), (logging.WARNING, "[VAIQ_WARN]: "), (logging.INFO, "[VAIQ_NOTE]: "))

log = logging.getLogger(LOGGER_NAME)


def _interactive() -> bool:
    """True in an interactive session (``python -i``, the REPL, IPython), where nndct prints to stdout."""
    return hasattr(sys, "ps1") or bool(getattr(sys.flags, "interactive", 0))


def _printed_above(logger: logging.Logger) -> bool:
    """Whether a handler above ``logger`` receives its records (the user configured logging)."""
    current = logger
    while current.propagate and current.parent is not None:
        current = current.parent
        if current.handlers:
            return True
    return False


class ConsoleHandler(logging.Handler):
    """Prints a drop-in record as the real quantizer prints its screen log: ``[VAIQ_NOTE]: <message>``
    on stderr (stdout when interactive), looked up when the record is printed (so a redirected
    ``sys.stderr`` is followed); nothing when a handler above the logger prints it anyway."""

    def emit(self, record: logging.LogRecord) -> None:
        if _printed_above(log):
            return
        try:
            prefix = next(p for level, p in PREFIXES if record.levelno >= level) if record.levelno >= logging.INFO else ""
            stream = sys.stdout if _interactive() else sys.stderr
            stream.write(prefix + record.getMessage() + "\n")
            stream.flush()
        except Exception:  # a closed stream must not break the user's script
            self.handleError(record)


def install() -> None:
    """Make the drop-in's notes visible by default (the module docstring); idempotent, and it keeps a
    level the user set on ``pipeline.apis``."""
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    if not any(isinstance(h, ConsoleHandler) for h in log.handlers):
        log.addHandler(ConsoleHandler())


def note(message: str, *args: Any) -> None:
    """One ``[VAIQ_NOTE]`` line: what the drop-in did, e.g. which file it wrote."""
    log.info(message, *args)
