"""The simulation's xmodel against the real quantizer's (tests/data/golden_xmodel, see its README).

Each of the 16 cases (golden and golden_wide models, configs default and nocle) is driven through the
drop-in API exactly as the real files were made: calibration in one process, then in a NEW process
test mode, one batch-1 forward first, ``export_xmodel``. The file must equal the real one as a parsed
message (``op_defs`` aside, maps sorted: the real files' bytes differ between identical runs): the
same ops in the same order with the same names, types, attributes, constants, fix positions, output
tensors and root subgraph. The names are compared exactly where this torch numbers trace values as the
references' torch did, else up to their numbers (tests/support/xmodel_compare.py states the rule).
"""
import os

import pytest

from pipeline.xir import schema
from tests.support.xmodel_compare import assert_same_xmodel
from tests.support.xmodel_golden_helper import CASES, folder, golden_file


@pytest.mark.parametrize("set_name,name,config", CASES)
def test_xmodel_equals_the_real_quantizers_file(set_name, name, config, golden_xmodels):
    xdir = os.path.join(folder(golden_xmodels, set_name, name, config), "xmodel")
    files = os.listdir(xdir)
    real_path = golden_file(set_name, name, config)
    assert files == [os.path.basename(real_path)]  # <Model>_int.xmodel, nothing else
    with open(os.path.join(xdir, files[0]), "rb") as f:
        assert len(schema.parse_graph(f.read()).op_defs) == 0  # not written (see docs/xmodel.md)
    assert_same_xmodel(os.path.join(xdir, files[0]), real_path)
