"""QuantStub and DeQuantStub (``nndct_quant_stub``, ``nndct_dequant_stub``): where quantization starts and
ends in a model that marks its quantized parts (``pytorch_nndct.nn.QuantStub``/``DeQuantStub``).

nndct's rule (``GraphOptimizer._tag_quant_nodes`` in ``nndct_shared/optimization/optimizer.py``): when the
graph holds any stub, a node is in the quantized part exactly when a QuantStub reaches it along its consumers
without passing a DeQuantStub (the DeQuantStub itself is outside), and a source node other than an input (a
constant) joins when a consumer in the part is no QuantStub; without stubs every node is in it. Only nodes of
the part are quantized (``NndctGraphHolder.is_node_quantizable``), grouped (``group_up``) and run with the
DPU's arithmetic (the modules ask ``node.in_quant_part``); the rest runs in float. A QuantStub's output is
quantized as a network input is (fix position scope 1: ``TORCHQuantizer.calibrate_int``); a DeQuantStub is an
identity. Both stub functions return a clone of their input (``nn/modules/function.py`` ``QuantStubF``,
``DeQuantStubF``).

The classes here are the drop-in's (``pipeline.nn.QuantStub``, ``pipeline.nn.DeQuantStub``, as
``pytorch_nndct.nn``'s): modules of their own that the capture keeps as one node each (a leaf of the trace).
"""
from typing import Any, Sequence

from torch import nn
import torch

from .dpu_support import Verdict, dpu_unless
from .onnx_form import alias
from .record import Absent, DpuRule, OpRecord, OpSpec
from .xmodel_support import XmodelForm, no_attrs
from .sim_support import SimForm

QUANT_STUB = "nndct_quant_stub"
DEQUANT_STUB = "nndct_dequant_stub"


class QuantStubF(torch.autograd.Function):
    """The QuantStub's function (``nn/modules/function.py``): a clone, its gradient passed through. Its name is
    what nndct's parser knows the traced op by (``prim::PythonOp`` QuantStubF), as the xmodel's names are."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return grad.clone()


class DeQuantStubF(QuantStubF):
    """The DeQuantStub's function (``nn/modules/function.py``): the same clone under its own name, which the
    trace records (``prim::PythonOp`` DeQuantStubF)."""


def _apply(x: Any, stub: nn.Module, fn: Any) -> Any:
    """``stub`` on ``x`` as ``pytorch_nndct.nn``'s stubs take it: a tensor through ``fn`` (a clone), a sequence
    stub by stub (one element: that element alone), anything else returned as is."""
    if isinstance(x, torch.Tensor):
        return fn.apply(x)
    if not isinstance(x, Sequence):
        return x
    out = [stub(e) for e in x]
    return out[0] if len(out) == 1 else out


class QuantStub(nn.Module):
    """Quantization starts here (``pytorch_nndct.nn.QuantStub``): what follows, up to a :class:`DeQuantStub`,
    is quantized; its output is quantized as a network input is. Forward: a clone of the input tensor
    (any shape, dtype kept); a list or tuple element by element, as the real one."""

    def forward(self, inputs: Any) -> Any:
        return _apply(inputs, self, QuantStubF)


class DeQuantStub(nn.Module):
    """Quantization ends here (``pytorch_nndct.nn.DeQuantStub``): what follows, up to the next
    :class:`QuantStub`, runs in float. Forward: a clone of the input tensor; a list or tuple element by
    element, as the real one."""

    def forward(self, inputs: Any) -> Any:
        return _apply(inputs, self, DeQuantStubF)


def _dpu_quant_stub(node: Any, ctx: Any) -> Verdict:
    """A QuantStub is its part's input: the load engine brings it in, as a graph input (the real Inspector
    gives it the device USER, as the inputs: ``device_allocator.py``)."""
    return dpu_unless([], notes=["the input of a quantized part (XIR data): the load engine brings it in"])


def _lower_identity(lo: Any) -> Any:
    """A stub in the lowered test-mode model: an ``nn.Identity`` under its node's name (the same values as its
    clone), without the autograd function a TorchScript could not hold (nndct's ``remove_quant_dequant_stub``
    drops the stubs from its TorchScript too); the ONNX exports write it as an alias."""
    return lo.call_module(nn.Identity()), True


# torch's own call (a clone: the same values), written as an identity in the lowered model, inside the parts or not
_IDENTITY = SimForm(lambda s: None, _lower_identity, True)


def _create_data(w: Any, node: Any) -> None:
    """A QuantStub: its part's input, XIR ``data`` of the node's output shape, float32 (``xop_creator.py``:
    ``QUANT_STUB: ("data", data_xop)``)."""
    w.fixed_op(node.name, "data", {"shape": list(node.out.shape or [1]), "data_type": "FLOAT32"})


RECORD = OpRecord(
    family="quant_stub",
    specs={QUANT_STUB: OpSpec("io", True, False, False),
           DEQUANT_STUB: OpSpec("io", False, False, False)},
    modules={QuantStub: QUANT_STUB, DeQuantStub: DEQUANT_STUB},
    approximation=Absent("marks where quantization starts and ends; nothing is computed"),
    source="pytorch_nndct/nn/modules/quant_stubs.py, function.py; nndct_shared/optimization/optimizer.py "
           "(_tag_quant_nodes); nndct_shared/nndct_graph/nndctgraph_holder.py (is_node_quantizable); "
           "pytorch_nndct/quantization/torchquantizer.py (calibrate_int: scope 1); "
           "nndct_shared/compile/xop_creator.py (QUANT_STUB: data), deploy_optimizer.py (partition_by_quant_part)",
    onnx={QUANT_STUB: alias, DEQUANT_STUB: alias},
    dpu_rule={QUANT_STUB: DpuRule(("quantstub",), _dpu_quant_stub),
              DEQUANT_STUB: Absent("outside every quantized part: the inspector's verdict for such nodes (CPU)")},
    xmodel={QUANT_STUB: XmodelForm(no_attrs, _create_data),
            DEQUANT_STUB: Absent("outside every quantized part: in no file (nndct's partition_by_quant_part)")},
    xir_ops=Absent("the xmodel writer writes no XIR op for it"),
    traced={QUANT_STUB: ("QuantStubF",), DEQUANT_STUB: ("DeQuantStubF",)},  # prim::PythonOp of these functions
    refusals={},
    sim={QUANT_STUB: _IDENTITY, DEQUANT_STUB: _IDENTITY},
    roles={"quant_start": (QUANT_STUB,), "quant_end": (DEQUANT_STUB,), "input_scope": (QUANT_STUB,)},
)
