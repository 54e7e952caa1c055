#!/usr/bin/env python
"""Run a pipeline config: ``python scripts/run_pipeline.py configs/digits_sim_zcu102.yaml``.

The same as ``python -m pipeline run ...``; ``--help`` lists the options.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import main  # noqa: E402

if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args if args[:1] == ["run"] else ["run"] + args))
