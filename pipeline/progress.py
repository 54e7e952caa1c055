"""Progress of the steps on stderr, so that no step is silent for minutes (a ResNet-18 run at 224x224
spends minutes in train, test and export on two cores).

Two kinds, both silent with ``--quiet`` (the ``pipeline`` logger above INFO):

- ``phase(what)``: a log line when a phase of a step starts and one with its duration when it ends,
  wherever stderr goes (a terminal, a log file, CI, a pipe).
- ``progress(iterable, desc, total)``: a loop's progress. A tqdm bar where stderr is a terminal;
  elsewhere, where a bar would print nothing useful, a log line every ``LOG_EVERY_S`` seconds
  (``eval: 12/40 batches, 31 s, about 72 s left``), so a short loop adds no line at all.
"""
import contextlib
import logging
import sys
import time
from typing import Any, Iterator, Optional

log = logging.getLogger("pipeline")

LOG_EVERY_S = 30.0  # seconds between two progress lines of a loop when stderr is not a terminal


@contextlib.contextmanager
def phase(what: str) -> Iterator[None]:
    """Log ``what ...`` now and ``what: done in N s`` when the block ends (not when it raises: the
    error says what happened)."""
    log.info("%s ...", what)
    start = time.perf_counter()
    yield
    log.info("%s: done in %s", what, seconds(time.perf_counter() - start))


def seconds(s: float) -> str:
    """``0.4 s``, ``12.3 s``, ``4 min 05 s``."""
    if s < 60:
        return "%.1f s" % s
    return "%d min %02d s" % (s // 60, s % 60)


class Progress:
    """A loop's progress: iterate over it (``iterable`` given) or call ``update``/``set_postfix`` and
    ``close`` by hand (``iterable=None``). See ``progress``."""

    def __init__(self, iterable: Any, desc: str, total: Optional[int] = None, unit: str = "batch") -> None:
        self.iterable, self.desc, self.total, self.unit = iterable, desc, total, unit
        self.n = 0
        self.postfix = ""
        self.start = self.last = time.perf_counter()
        self.bar = None  # type: Any
        self.lines = False
        if log.isEnabledFor(logging.INFO):
            if _is_terminal():
                from tqdm import tqdm
                self.bar = tqdm(iterable, desc=desc, total=total, unit=unit, leave=False)
            else:
                self.lines = True

    def __iter__(self) -> Iterator[Any]:
        if self.bar is not None:
            for item in self.bar:
                yield item
            return
        for item in self.iterable:
            yield item
            self.update(1)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.lines:
            now = time.perf_counter()
            if now - self.last >= LOG_EVERY_S:
                self.last = now
                log.info("%s", self.line(now))

    def set_postfix(self, **values: Any) -> None:
        if self.bar is not None:
            self.bar.set_postfix(**values)
        self.postfix = ", ".join("%s %s" % kv for kv in sorted(values.items()))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def line(self, now: float) -> str:
        """``desc: n/total units, elapsed, about N s left[, postfix]``."""
        elapsed = now - self.start
        done = "%d/%d" % (self.n, self.total) if self.total else "%d" % self.n
        units = "batches" if self.unit == "batch" else self.unit + "s"  # epochs, images, formats
        text = "%s: %s %s, %s" % (self.desc, done, units, seconds(elapsed))
        if self.total and 0 < self.n < self.total:
            text += ", about %s left" % seconds(elapsed / self.n * (self.total - self.n))
        return text + (", " + self.postfix if self.postfix else "")


def _is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def progress(iterable: Any, desc: str, total: Optional[int] = None, unit: str = "batch") -> Progress:
    """Wrap ``iterable`` (``None``: a progress updated by hand) in a ``Progress``: a tqdm bar on a
    terminal, else a log line every LOG_EVERY_S seconds; silent with --quiet."""
    return Progress(iterable, desc, total, unit)
