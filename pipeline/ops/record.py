"""The op record: everything the project knows about one op family, held in one place.

A family is one unit (a module of ``pipeline/ops/``, found in the literal list ``RECORDS`` of
``pipeline/ops/__init__.py``) that defines its nndct op type names and one :class:`OpRecord`. The
rooms that need to know an op (the graph capture, the simulation, the exports, the xmodel writer, the
interpreter, the inspector) read the records; none of them keeps a table of ops of its own.

The pattern follows onnx's reference evaluator (one module per op under ``onnx/reference/ops``,
listed in ``_op_list.py``) and torch.ao's ``backend_config`` (support written as data, by family).
A piece an op does not have is declared with :class:`Absent` and the reason
(``tests/project/test_op_records.py`` walks the list and fails on a piece neither given nor declared).
"""
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

from torch import nn

# How nndct treats an op type (``nndct_shared/base/key_names.py`` NNDCT_OP, ``QUANTIZABLE_OPS``,
# the ``SoftFuse*`` commands of ``nndct_shared/quantization/commander.py``):
# - kind: "dpu" (a DPU operation), "float" (a float operator: runs on the CPU in float, on its quantized
#   input), "layout" (moves or views data; where it runs follows its neighbours), "shape" (arithmetic on
#   traced sizes: Python ints, never quantized), "io" (input, constant);
# - quantizable: in nndct's QUANTIZABLE_OPS: its group's output always gets a fix position, and so do the
#   outputs feeding it (any other node gets one only when it feeds a quantizable node);
# - layout: the node never carries its own fix position; it defers to its producer;
# - group_up: the node joins its producer's quantization group when it is the producer's only consumer.
OpSpec = namedtuple("OpSpec", "kind quantizable layout group_up")

# A functional form's positional parameters and their defaults: (names, {name: default}).
Signature = Tuple[Tuple[str, ...], Dict[str, Any]]

# A module class whose op type depends on its attributes (a conv's groups, a Hardtanh's bounds):
# ``rule(module, strict) -> op type``, or None when the module is not this family's after all.
ModuleRule = Callable[[nn.Module, bool], Optional[str]]


@dataclass(frozen=True)
class Absent:
    """A piece an op family does not have, and why (e.g. "the real quantizer writes no xmodel for it",
    "torch's own call is the DPU's arithmetic")."""
    reason: str

    def __post_init__(self) -> None:
        if not self.reason.strip():
            raise ValueError("Absent needs the reason the piece is missing")


@dataclass(frozen=True)
class OpRecord:
    """One op family: the nndct op types it holds and everything each room needs to know about them.

    Attributes:
        family: the unit's name (its module's name under ``pipeline/ops/``).
        specs: nndct op type -> :data:`OpSpec`, in the order the types are listed.
        modules: module class -> op type (the graph capture: ``torch.fx`` ``call_module``, exact class).
        module_rules: module class -> :data:`ModuleRule`, for classes whose type depends on attributes.
        functions: callable -> op type (``call_function``).
        methods: tensor method name -> op type (``call_method``).
        signatures: op type -> :data:`Signature` of its functional and method forms (the arguments by
            name, defaults filled; the xmodel lowering and the ONNX export read them).
        roles: role -> op types of this family that play it. Roles: ``conv`` (the 2-D convolutions),
            ``params`` (layers with weights the quantizer quantizes), ``bias_corr`` (nndct corrects their
            bias), ``norm`` (float operators whose gamma and beta nndct's module quantizes), ``arithmetic``
            (a Python number operand becomes an nndct_const node), ``binary`` (element-wise binary ops of
            tensors), ``const_operand`` (nndct's parser turns a number operand into a const node,
            numbered first: ``OptPass.transform_const_scalar_to_const_tensor``).
        approximation: what the DPU computes instead of the float op (written once, in this unit), or
            :class:`Absent` with the reason (the op is exact, or never runs on the DPU).
        source: the upstream files the record's facts come from.
        xmodel: nndct op type -> ``xmodel_support.XmodelForm`` (how the xmodel writer carries it: ``lower(lo,
            node) -> attrs``, the nndct deploy-graph attributes, given the room's lowering context at call
            time; ``create(w, node)``, the XIR ops nndct's ``xop_creator.py`` makes for it, given the room's
            writer at call time; and its layout facts: NHWC form, layout attribute rewrite, weights
            layout), or :class:`Absent` with the reason the writer refuses the type (the refusal's
            message is the writer's own: ``fx/refusals.py``). Every type of the family has one.
        xir_ops: XIR op type -> ``xir_support.XirOp`` for every XIR op type the family's creators write
            (its op definition with its shape inference, its interpreter kernel ``kernel(run, op, ins)``
            and the DPU inspector's name for it), or :class:`Absent` with the reason where the family
            writes none of its own. A type several families write is held by one (``mul``: eltwise;
            ``stack``: reshape). The XIR format's own types (``xir/opdefs.py``, ``xir/interp_ops.py``) are
            the graph's structure, ``data`` (io writes it; the interpreter feeds it the caller's input),
            ``const`` and ``fix`` (the writer's own), and XIR's types no family writes (``prelu``, ...).
        traced: nndct op type -> the torch.jit kinds (without ``aten::``) whose traced op nndct's parser
            makes the type from: the xmodel's op names are that op's (``quantizers/sim/xmodel/names.py``,
            docs/xmodel.md#names). A type not listed is looked for under its own name (``aten::silu_``:
            ``silu_``); ``{}`` where every type of the family is.
    """
    family: str
    specs: Mapping[str, OpSpec]
    approximation: Union[str, Absent]
    source: str
    xmodel: Mapping[str, Any]
    xir_ops: Union[Mapping[str, Any], Absent]
    traced: Mapping[str, Tuple[str, ...]]
    modules: Mapping[type, str] = field(default_factory=dict)
    module_rules: Mapping[type, ModuleRule] = field(default_factory=dict)
    functions: Mapping[Callable[..., Any], str] = field(default_factory=dict)
    methods: Mapping[str, str] = field(default_factory=dict)
    signatures: Mapping[str, Signature] = field(default_factory=dict)
    roles: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)

    def types(self) -> Tuple[str, ...]:
        """The family's nndct op types, in order."""
        return tuple(self.specs)
