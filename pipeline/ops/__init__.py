"""THE op list: every op family the project knows, one record each (``record.OpRecord``), in one literal
list, ``RECORDS``. Adding an op is a unit under ``pipeline/ops/`` and its line here.

An op type is nndct's name for it (``nndct_shared/base/key_names.py``, ``NNDCT_OP``). An operator nndct
has no type for keeps its torch type ``aten::<name>`` and runs in float (nndct's warning
``QUANTIZER_TORCH_FLOAT_OP``; its node is named ``aten_<name>_<index>``): :data:`GENERIC_FLOAT`.

Everything below the list is read off the records: the capture's module/function/method tables, each
type's :data:`record.OpSpec`, the functional forms' signatures, the role groups (``CONV_TYPES``,
``PARAM_TYPES``, ...) and the inspector's DPU-support rules (``DPU_RULES``, ``DPU_RULE_BY_NAME``). The type
names are re-exported so that ``from pipeline import ops as t`` gives
``t.CONV2D``.
"""
from typing import Any, Callable, Dict, Optional, Tuple, Union

from . import (batch_norm, concat, conv, conv1d, dense, eltwise, expand, float_activation, float_arith, group_norm,
               hard_sigmoid, identity, instance_norm, io, layer_norm, leaky_relu, matmul, mean, pad, permute,
               pixel_shuffle, pool, prelu, quant_stub, reduce_max, relu, reshape, resize, rnn, shape, slicing, softmax)
from .batch_norm import BATCH_NORM
from .concat import CONCAT
from .conv import CONV2D, CONVTRANSPOSE2D, DEPTHWISE_CONV2D, DEPTHWISE_CONVTRANSPOSE2D
from .dense import DENSE
from .eltwise import ADD, DIV, MULTIPLY, RSUB, SUB
from .expand import EXPAND
from .float_activation import CLAMP, GELU, LOG_SOFTMAX, MISH, SIGMOID, SILU, TANH
from .float_arith import EQUAL, NEG, RECIPROCAL, REMAINDER
from .hard_sigmoid import HSIGMOID, HSWISH
from .identity import IDENTITY
from .io import CONST, INPUT, RETURN, ZEROS
from .layer_norm import LAYER_NORM
from .leaky_relu import LEAKY_RELU
from .matmul import MATMUL
from .mean import MEAN
from .pad import PAD
from .permute import PERMUTE, TRANSPOSE
from .pool import ADAPTIVEAVGPOOL2D, AVG_POOL, MAX_POOL
from .prelu import PRELU
from .quant_stub import DEQUANT_STUB, QUANT_STUB
from .record import Absent, DpuRule, OpRecord, OpSpec, Signature
from .reduce_max import MAX
from .relu import HARDTANH, RELU, RELU6
from .reshape import CONTIGUOUS, FLATTEN, RESHAPE, SQUEEZE, UNSQUEEZE
from .resize import RESIZE
from .rnn import GRU, LSTM
from .shape import FLOOR_DIVIDE, SHAPE, TRUNC_DIV
from .sim_support import OPAQUE_CALLS  # functions a lowering calls that torch.fx cannot trace through
from .slicing import FILL, INDEX, SELECT, SPLIT_FUNCTIONS, SPLIT_METHODS, STRIDED_SLICE
from .softmax import SOFTMAX
from .xmodel_support import XmodelForm

RECORDS = (
    io.RECORD,
    conv.RECORD,
    dense.RECORD,
    batch_norm.RECORD,
    relu.RECORD,
    leaky_relu.RECORD,
    prelu.RECORD,
    pool.RECORD,
    resize.RECORD,
    hard_sigmoid.RECORD,
    eltwise.RECORD,
    concat.RECORD,
    permute.RECORD,
    slicing.RECORD,
    reshape.RECORD,
    expand.RECORD,
    shape.RECORD,
    matmul.RECORD,
    float_arith.RECORD,
    pad.RECORD,
    float_activation.RECORD,
    softmax.RECORD,
    mean.RECORD,
    layer_norm.RECORD,
    identity.RECORD,
    conv1d.RECORD,
    instance_norm.RECORD,
    group_norm.RECORD,
    pixel_shuffle.RECORD,
    rnn.RECORD,
    reduce_max.RECORD,
    quant_stub.RECORD,
)  # type: Tuple[OpRecord, ...]

GENERIC_FLOAT = OpSpec("float", False, False, False)  # any aten::<name> node

OPS = {op: s for r in RECORDS for op, s in r.specs.items()}  # type: Dict[str, OpSpec]
MODULE_OPS = {cls: op for r in RECORDS for cls, op in r.modules.items()}  # type: Dict[type, str]
MODULE_RULES = {cls: rule for r in RECORDS for cls, rule in r.module_rules.items()}
FUNCTION_OPS = {fn: op for r in RECORDS for fn, op in r.functions.items()}  # type: Dict[Callable, str]
FUNCTION_RULES = {fn: rule for r in RECORDS for fn, rule in r.function_rules.items()}
METHOD_OPS = {name: op for r in RECORDS for name, op in r.methods.items()}  # type: Dict[str, str]
SIGNATURES = {op: sig for r in RECORDS for op, sig in r.signatures.items()}  # type: Dict[str, Signature]
# aten kind -> (nndct type, outputs) of a call's form with several outputs (record.OpRecord.several)
SEVERAL = {kind: form for r in RECORDS for kind, form in r.several.items()}  # type: Dict[str, Tuple[str, int]]
# module class -> its record.Prelude (the nodes torch.jit traces in its forward before its own op)
PRELUDES = {cls: prelude for r in RECORDS for cls, prelude in r.preludes.items()}  # type: Dict[type, Callable]
RECORD_OF = {op: r for r in RECORDS for op in r.specs}  # type: Dict[str, OpRecord]
# op type (and the aten:: types a family's rule judges) -> its DpuRule or Absent (the inspector)
DPU_RULES = {op: rule for r in RECORDS for op, rule in r.dpu_rule.items()}  # type: Dict[str, Union[DpuRule, Absent]]
# the inspector's name -> the DpuRule that prints it (nodes known by name only: an xmodel's ops); first wins
DPU_RULE_BY_NAME = {}  # type: Dict[str, DpuRule]
for _rule in DPU_RULES.values():
    if isinstance(_rule, DpuRule):
        for _name in _rule.names:
            DPU_RULE_BY_NAME.setdefault(_name, _rule)

XMODEL = {op: form for r in RECORDS for op, form in r.xmodel.items()}  # type -> XmodelForm or Absent
# XIR op type -> xir_support.XirOp, for the XIR types the units write (the XIR format's room adds its own)
TRACED = {op: kinds for r in RECORDS for op, kinds in r.traced.items()}  # type -> torch.jit kinds (names.py)
# call (module class, function, method name) -> refusal.Known: the calls some stage refuses (fx/refusals.py)
REFUSALS = {call: known for r in RECORDS for call, known in r.refusals.items()}  # type: Dict[Any, Any]
SIM = {op: form for r in RECORDS for op, form in r.sim.items()}  # type -> SimForm or Absent (quantizers/sim)
XIR_OPS = {x: piece for r in RECORDS if not isinstance(r.xir_ops, Absent) for x, piece in r.xir_ops.items()}
NORM = {op: form for r in RECORDS for op, form in r.norm.items()}  # norm type -> sim_support.NormForm
LAYER = {op: form for r in RECORDS for op, form in r.layer.items()}  # params type -> sim_support.LayerForm
# custom XIR op type -> xir_support.CustomKernel, for the custom types the units write and the interpreter runs
CUSTOM_KERNELS = {x: k for r in RECORDS for x, k in r.custom_kernels.items() if not isinstance(k, Absent)}


def xmodel_form(op: str) -> Optional[XmodelForm]:
    """How the xmodel writer carries an op type (``record.OpRecord.xmodel``): its form, or None where the
    writer refuses the type (its record declares it Absent) or no record holds it (an ``aten::*`` type)."""
    form = XMODEL.get(op)
    return form if isinstance(form, XmodelForm) else None


def call_arguments(op: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """A call of op type ``op`` (a functional or method form) by parameter name: its record's signature
    (``SIGNATURES``) binds ``args`` in order and ``kwargs`` by name over the defaults; the values as given
    (an fx node stays a node).

    Raises:
        KeyError: ``op``'s record gives no signature."""
    params, defaults = SIGNATURES[op]
    bound = dict(defaults)
    bound.update(zip(params, args))
    bound.update(kwargs)
    return bound


def sim_form(op: str) -> Optional[Any]:
    """The simulation's form of an op type (``record.OpRecord.sim``: a ``sim_support.SimForm``), or None where
    the simulation runs torch's own call (the record's ``sim_support.TORCH``, or an ``aten::*`` type)."""
    form = SIM.get(op)
    return None if form is None or isinstance(form, Absent) else form


def norm_form(op: str) -> Optional[Any]:
    """How a ``norm``-role type computes with its quantized weight and bias (``record.OpRecord.norm``: a
    ``sim_support.NormForm``), or None where its record gives none (a layer norm, a PReLU: the simulation's own)."""
    return NORM.get(op)


def layer_form(op: str) -> Optional[Any]:
    """How a ``params``-role type computes with given weight and bias (``record.OpRecord.layer``: a
    ``sim_support.LayerForm``), or None where its record gives none (the 2-D convs, linear, batch norm: the
    simulation's own)."""
    return LAYER.get(op)


def with_role(role: str) -> Tuple[str, ...]:
    """The op types that play ``role`` (``record.OpRecord.roles``), in the list's order."""
    return tuple(op for r in RECORDS for op in r.roles.get(role, ()))


CONV_TYPES = with_role("conv")
PARAM_TYPES = with_role("params")
BIAS_CORR_TYPES = with_role("bias_corr")
NORM_TYPES = with_role("norm")
ARITHMETIC_TYPES = with_role("arithmetic")
BINARY_TYPES = with_role("binary")
CONST_OPERAND_TYPES = with_role("const_operand")
OPERAND_LIST_TYPES = with_role("operand_list")
QUANT_START_TYPES = with_role("quant_start")
QUANT_END_TYPES = with_role("quant_end")
INPUT_SCOPE_TYPES = with_role("input_scope")


def spec(op: str) -> OpSpec:
    """The OpSpec of an op type (``aten::*`` types: the generic float operator)."""
    return OPS.get(op, GENERIC_FLOAT)


def is_float_operator(op: str) -> bool:
    """True for the op types that run in float on the CPU (not on the DPU)."""
    return spec(op).kind == "float"


def is_layout(op: str) -> bool:
    """True for the op types that only move or view data."""
    return spec(op).kind == "layout"
