"""Fixtures shared by the xmodel tests of this folder."""
import os
import subprocess
import sys

import pytest

from tests.support import REPO, SUPPORT


@pytest.fixture(scope="session")
def golden_xmodels(tmp_path_factory):
    """The simulation's xmodels of the 16 golden cases (tests/support/xmodel_golden_helper.py: calibration
    of every case in one process, then test mode and ``export_xmodel`` of every case in another, as
    tests/data/golden_xmodel was made); the root folder (``xmodel_golden_helper.folder(root, ...)``)."""
    return run_phases("xmodel_golden_helper.py", str(tmp_path_factory.mktemp("xmodel_golden")))


def run_phases(script, root):
    """``python tests/support/<script> calib ROOT``, then ``... test ROOT`` in another process (the repository
    on PYTHONPATH); AssertionError with the output's tail when one fails. Returns ``root``."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for mode in ("calib", "test"):
        proc = subprocess.run([sys.executable, os.path.join(SUPPORT, script), mode, root], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        assert proc.returncode == 0, proc.stdout[-4000:]
    return root
