"""The xmodel comparison of tests/support/xmodel_compare.py, on a real file: exact where this torch numbers
trace values as the references' torch, and otherwise (rule (a) + (b): names equal up to their runs of
digits, the graphs equal after renaming the ops by position) blind to the numbers alone: a changed
constant, fix position, op order, edge or non-digit character of a name still fails. Both modes run
under every torch."""
import re

import pytest
import torch

from tests.support import xmodel_compare as xc
from tests.support.xmodel_golden_helper import golden_file

REAL = golden_file("golden", "resblock", "default")


def _renumbered(graph):
    """A copy of ``graph`` with every run of digits of every op name n -> n + 2, as another torch's
    trace numbering would give (``ret_1`` -> ``ret_3``)."""
    copy = type(graph)()
    copy.CopyFrom(graph)
    names = [re.sub(r"[0-9]+", lambda m: str(int(m.group()) + 2), n) for n in xc.op_names(graph)]
    assert len(set(names)) == len(names) and names != xc.op_names(graph)
    return xc.rename_ops(copy, names)


def _bytes(graph):
    return graph.SerializeToString(deterministic=True)


def _op(graph, op_type):
    return next(op for op in graph.op_node if op.op_type == op_type)


def test_the_rule_is_stated_by_torch_version():
    assert xc.numbering_matches_references(xc.REFERENCE_TORCH)
    assert xc.numbering_matches_references("2.15.0") and not xc.numbering_matches_references("1.13.1+cu117")
    assert xc.numbering_matches_references() == (torch.__version__.split(".")[0] == "2")


def test_renumbered_names_pass_the_rule_and_fail_the_exact_comparison():
    real = xc.load(REAL)
    mine = _bytes(_renumbered(real))
    xc.assert_same_xmodel(mine, REAL, exact_names=False)
    xc.assert_same_xmodel(REAL, REAL, exact_names=True)
    with pytest.raises(AssertionError, match="op order/names differ from op 0"):
        xc.assert_same_xmodel(mine, REAL, exact_names=True)


@pytest.mark.parametrize("change", ["constant", "fix_point", "edge", "order", "name", "count", "tensor_name"])
def test_the_rule_still_sees_every_difference_but_the_numbers(change):
    mine = _renumbered(xc.load(REAL))
    if change == "constant":
        const = _op(mine, "const")
        data = bytearray(const.op_attr["data"].bytes_value.value)
        data[0] ^= 1
        const.op_attr["data"].bytes_value.value = bytes(data)
    elif change == "fix_point":
        _op(mine, "fix").op_attr["fix_point"].int32_value += 1
    elif change == "edge":  # an op reads another input than the reference's
        conv = _op(mine, "conv2d")
        conv.args[0].arg_ops[0] = mine.op_node[0].op_name
    elif change == "order":
        a, b = type(mine.op_node[0])(), type(mine.op_node[0])()
        a.CopyFrom(mine.op_node[0])
        b.CopyFrom(mine.op_node[1])
        mine.op_node[0].CopyFrom(b)
        mine.op_node[1].CopyFrom(a)
    elif change == "name":
        mine.op_node[5].op_name += "x"
    elif change == "count":
        del mine.op_node[-1]
    elif change == "tensor_name":
        mine.op_node[3].output_tensor.tensor_name += "_out"
    with pytest.raises(AssertionError):
        xc.assert_same_xmodel(_bytes(mine), REAL, exact_names=False)


def test_the_reference_renamed_to_this_torchs_names():
    real = xc.load(REAL)
    mine = _renumbered(real)
    copy = xc.load(xc.reference_for_this_torch(REAL, _bytes(mine), exact_names=False))
    assert xc.op_names(copy) == xc.op_names(mine)
    xc.assert_same_xmodel(_bytes(copy), _bytes(mine), exact_names=True)  # every reference renamed with it
    with open(REAL, "rb") as f:
        assert xc.reference_for_this_torch(REAL, _bytes(mine), exact_names=True) == f.read()
    mine.op_node[2].op_type = "relu"
    with pytest.raises(AssertionError, match="op 2: type relu vs"):
        xc.reference_for_this_torch(REAL, _bytes(mine), exact_names=False)
