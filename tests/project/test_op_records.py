"""The op list (pipeline/ops/): every family one unit, one record, every piece given or declared absent
with its reason, and no two records claiming the same op type or the same call."""
import importlib
import pkgutil

import pytest

from pipeline import ops
from pipeline.ops.record import Absent, OpRecord, OpSpec

KINDS = ("dpu", "float", "layout", "shape", "io")
ROLES = ("conv", "params", "bias_corr", "norm", "arithmetic", "binary", "const_operand")


def _units():
    """The modules under pipeline/ops/ that define a RECORD (the others, like record.py, are support
    modules the units share)."""
    names = (m.name for m in pkgutil.iter_modules(ops.__path__))
    return sorted(n for n in names if hasattr(importlib.import_module("pipeline.ops." + n), "RECORD"))


def test_every_unit_is_in_the_list_once_and_is_named_after_its_family():
    families = [r.family for r in ops.RECORDS]
    assert len(families) == len(set(families))
    assert sorted(families) == _units(), "a unit under pipeline/ops/ is missing from RECORDS, or the reverse"
    for record in ops.RECORDS:
        unit = importlib.import_module("pipeline.ops." + record.family)
        assert unit.RECORD is record
        assert (unit.__doc__ or "").strip(), "ops/%s.py says what the family is" % record.family


@pytest.mark.parametrize("record", ops.RECORDS, ids=lambda r: r.family)
def test_every_piece_of_a_record_is_given_or_declared_absent_with_its_reason(record):
    assert isinstance(record, OpRecord)
    assert record.specs, "a family holds at least one op type"
    for op, spec in record.specs.items():
        assert isinstance(spec, OpSpec) and spec.kind in KINDS, (op, spec)
    assert record.source.strip(), "the upstream source of the record's facts"
    assert isinstance(record.approximation, Absent) or record.approximation.strip()
    own = set(record.specs)
    for table in (record.modules, record.functions, record.methods):
        assert set(table.values()) <= own, "%s maps a call to another family's type" % record.family
    assert set(record.signatures) <= own
    for role, types in record.roles.items():
        assert role in ROLES and set(types) <= own, (role, types)


def test_no_op_type_or_call_is_claimed_twice():
    for attr in ("specs", "modules", "module_rules", "functions", "methods"):
        seen = {}
        for record in ops.RECORDS:
            for key in getattr(record, attr):
                assert key not in seen, "%s %r is in both %s and %s" % (attr, key, seen[key], record.family)
                seen[key] = record.family


def test_the_tables_are_read_off_the_records():
    assert ops.OPS == {op: s for r in ops.RECORDS for op, s in r.specs.items()}
    assert set(ops.MODULE_OPS.values()) | set(ops.FUNCTION_OPS.values()) | set(ops.METHOD_OPS.values()) <= set(ops.OPS)
    assert ops.RECORD_OF[ops.CONV2D].family == "conv" and ops.spec("aten::erf") == ops.GENERIC_FLOAT
    assert set(ops.CONV_TYPES) < set(ops.PARAM_TYPES) and ops.BIAS_CORR_TYPES == ops.CONV_TYPES + (ops.DENSE,)


def test_a_record_without_a_reason_for_a_missing_piece_is_refused():
    with pytest.raises(ValueError, match="reason"):
        Absent(" ")


def test_a_conv_with_string_padding_is_the_float_operator_torch_traces():
    from torch import nn
    from pipeline.ops.conv import CONVOLUTION_MODE, conv_type
    assert conv_type(nn.Conv2d(3, 8, 3, padding="same")) == CONVOLUTION_MODE == "aten::_convolution_mode"
    assert conv_type(nn.Conv2d(3, 8, 3, padding="valid")) == CONVOLUTION_MODE
    assert ops.is_float_operator(CONVOLUTION_MODE) and conv_type(nn.Conv2d(3, 8, 3, padding=1)) == ops.CONV2D


def test_prelu_quantizes_its_slopes_in_its_own_module():
    from torch import nn
    assert ops.MODULE_OPS[nn.PReLU] == ops.PRELU and ops.PRELU in ops.NORM_TYPES
    assert ops.spec(ops.PRELU).quantizable and not ops.spec(ops.PRELU).group_up
