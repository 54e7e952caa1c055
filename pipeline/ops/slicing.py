"""Slices and picks: ``x[a:b]`` (``nndct_strided_slice``), ``x[i]`` with an int (``nndct_select``: torch
traces ``aten::select``), ``x[t]`` with a tensor (``nndct_index``), one output of an op returning
several (``nndct_tuple_index``), the in-place fill of ``x[idx] = number`` (``aten::fill_``), and the
calls that split a tensor into pieces (chunk, split: each piece taken is an ``nndct_strided_slice``).
nndct warns ``QUANTIZER_TORCH_FLOAT_OP`` for select and index."""
import operator
from typing import Any

import torch

from .dpu_support import DPU, Verdict, cpu_verdict, follows
from .record import Absent, DpuRule, OpRecord, OpSpec

STRIDED_SLICE = "nndct_strided_slice"
SELECT = "nndct_select"
INDEX = "nndct_index"
TUPLE_INDEX = "nndct_tuple_index"
FILL = "aten::fill_"

# calls that split a tensor into a tuple; each piece taken becomes an nndct_strided_slice node
SPLIT_FUNCTIONS = (torch.chunk, torch.split)
SPLIT_METHODS = ("chunk", "split")


def dpu_piece(node: Any, ctx: Any) -> Verdict:
    """chunk / split and the pieces taken from them: channel slices of the producer's map, where
    the producer runs."""
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return cpu_verdict("The input of {} is not on DPU.".format(node.op), fixes=[follows(src.name)])
    return Verdict(DPU)


RECORD = OpRecord(
    family="slicing",
    specs={
        STRIDED_SLICE: OpSpec("layout", False, True, False),
        SELECT: OpSpec("float", False, False, False),
        INDEX: OpSpec("float", False, False, False),
        TUPLE_INDEX: OpSpec("layout", False, False, False),  # carries its own fix pos: the op's is a tuple
    },
    functions={operator.getitem: STRIDED_SLICE, torch.select: SELECT},
    methods={"select": SELECT},
    approximation=Absent("moves no value"),
    source="nndct_shared/base/key_names.py, pytorch_nndct/parse/op_dispatcher.py",
    dpu_rule={STRIDED_SLICE: DpuRule(("getitem",), dpu_piece), SELECT: Absent("a float operator of the quantizer"),
              INDEX: Absent("a float operator of the quantizer"),
              TUPLE_INDEX: Absent("no call of its own: the capture makes it for an op returning several outputs"),
              # the calls that split a tensor (SPLIT_FUNCTIONS, SPLIT_METHODS): no nndct type; the
              # pieces run where the producer does
              "aten::chunk": DpuRule(("chunk",), dpu_piece), "aten::split": DpuRule(("split",), dpu_piece)},
)
