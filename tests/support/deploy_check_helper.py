"""Drives the drop-in API on the cases of tests/data/deploy_check_real as its README says the real dumps
were made, one process per mode (run as a script):

    python tests/support/deploy_check_helper.py calib OUT_ROOT
    python tests/support/deploy_check_helper.py test OUT_ROOT

``calib``: per case, ``torch_quantizer('calib', model, (first 4 calibration samples of each input,))``,
8 forwards of 4, ``export_quant_config()`` into ``OUT_ROOT/<model>/<config>``. ``test``: in a fresh
process, ``torch_quantizer('test', ...)`` with the same example, ONE forward of the first eval sample
alone (batch 1), then ``export_xmodel(<folder>/export, deploy_check=True)``. Two threads, as the
references.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from tests.support import xmodel_golden_helper as golden  # noqa: E402

REAL = os.path.join(os.path.dirname(HERE), "data", "deploy_check_real")
# (set, model, config) of every stored reference, in xmodel_golden_helper's order
CASES = [(s, m, c) for s, m, c in golden.CASES if os.path.isdir(os.path.join(REAL, m, c))]


def folder(root, name, config):
    return os.path.join(root, name, config)


def run(mode, root):
    golden.run(mode, root, CASES, lambda root_, set_name, name, config: folder(root_, name, config), deploy_check=True)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
