#!/usr/bin/env python
"""Time the main job (the README's first command without the install) as whole processes.

``python scripts/bench_main_job.py [--config configs/digits_sim_zcu102.yaml] [--rounds 7]
[--baseline DIR]``

Each round starts, in turn, in fresh processes with the same interpreter:

- job: ``scripts/run_pipeline.py CONFIG`` into a new temporary run folder (every step, as the README
  runs it; its output is thrown away);
- floor: ``python -c "import torch"``, the start-up no run can avoid;
- baseline (``--baseline DIR``, optional): DIR's own ``scripts/run_pipeline.py`` and configs, e.g. an
  older commit checked out with ``git worktree add DIR <rev>``, timed in the same alternation.

The median wall time of each over the rounds is printed, with the job's ratio to the floor and to the
baseline (ratios taken round by round, so a drift in the machine's speed cancels), the load average
before and after, and the verdict on the goal (issue 13: at most 3.5 s with ``run.num_threads: 1``).
The first round is a warm-up (page cache, compiled bytecode, the boundary kernel's build) and is not
counted. On a shared machine compare the ratios; the absolute times move with the load.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from pipeline.cpu import load_average  # noqa: E402

GOAL_S = 3.5


def wall(argv: List[str]) -> float:
    """Seconds from the start of ``argv`` to its exit; a failed command stops the benchmark."""
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit("%s failed (exit %d): %s" % (" ".join(argv), proc.returncode,
                                             proc.stderr.decode(errors="replace")[-2000:]))
    return seconds


def job(repo: str, config: str, work_dir: str) -> List[str]:
    shutil.rmtree(work_dir, ignore_errors=True)
    return [sys.executable, os.path.join(repo, "scripts", "run_pipeline.py"), os.path.join(repo, config),
            "--set", "run.work_dir=%s" % work_dir]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/digits_sim_zcu102.yaml", help="relative to the repository")
    parser.add_argument("--rounds", type=int, default=7, help="counted rounds (one warm-up round more)")
    parser.add_argument("--baseline", help="another checkout of this repository, timed side by side")
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench_main_job_")
    commands = {"job": lambda: job(REPO, args.config, os.path.join(tmp, "job")),
                "floor": lambda: [sys.executable, "-c", "import torch"]}
    if args.baseline:
        commands["baseline"] = lambda: job(os.path.abspath(args.baseline), args.config, os.path.join(tmp, "base"))
    times = {name: [] for name in commands}  # type: dict
    print("%s, %d cores; load average before: %s" % (sys.executable, os.cpu_count() or 0, load_average()))
    try:
        for r in range(args.rounds + 1):
            for name, command in commands.items():
                seconds = wall(command())
                if r > 0:
                    times[name].append(seconds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {name: statistics.median(values) for name, values in times.items()}
    print("median of %d rounds (min-max): %s" % (args.rounds, ", ".join(
        "%s %.2f s (%.2f-%.2f)" % (name, med[name], min(times[name]), max(times[name])) for name in times)))
    print("job / floor (import torch): %.2fx" % statistics.median(
        j / f for j, f in zip(times["job"], times["floor"])))
    if "baseline" in times:
        print("job / baseline: %.2fx" % statistics.median(j / b for j, b in zip(times["job"], times["baseline"])))
    print("goal: the main job within %.1f s: %.2f s %s; load average after: %s"
          % (GOAL_S, med["job"], "met" if med["job"] <= GOAL_S else "MISSED", load_average()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
