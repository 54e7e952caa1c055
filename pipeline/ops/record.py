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

# The DPU-support rule of an op type, read by the inspector (``pipeline.inspect``):
# - names: the inspector's names of the type, as its reports print them; the first is the name of any
#   call of the type, the others are call spellings printed as called (``view`` for a reshape);
# - rule: ``rule(node, ctx) -> dpu_support.Verdict``. ``node`` is the inspector's node (``name``, ``op``
#   (its name), ``source``, ``inputs``, ``shape`` (NCHW), ``attrs``); ``ctx`` the graph context, given
#   at call time: ``ctx.target`` (a ``pipeline.targets.DpuTarget`` with engines), ``ctx.nodes``,
#   ``ctx.consumers``, ``ctx.verdicts``, ``ctx.producer(node, i)``, ``ctx.on_dpu(name)``;
# - judges_float: the rule judges the node even where the quantizer keeps it as a float operator
#   (otherwise such a node is the inspector's generic float-operator verdict);
# - attrs: ``attrs(module, arg) -> dict``, the call's attributes the rule reads that the inspector's trace
#   does not already give (``module``: the called ``nn.Module`` or None; ``arg(index, name, default)``: an
#   argument of a functional call), merged into the node's ``attrs``; None where it reads none.
DpuRule = namedtuple("DpuRule", "names rule judges_float attrs")
DpuRule.__new__.__defaults__ = (False, None)

def pair(value: Any) -> Tuple[int, int]:
    """An int or a pair of ints (torch's ``_pair`` arguments: a kernel, stride, padding, size) as a pair of
    ints; the pieces of every unit that read such an argument use it."""
    if isinstance(value, (tuple, list)):
        return int(value[0]), int(value[1])
    return int(value), int(value)


# A module class whose op type depends on its attributes (a conv's groups, a Hardtanh's bounds):
# ``rule(module, strict) -> op type``, or None when the module is not this family's after all.
ModuleRule = Callable[[nn.Module, bool], Optional[str]]

# What torch.jit traces inside a module's forward before the module's own op, where the call leaves it work
# (``nn.LSTM`` called without its initial states makes them: the batch size read and one zero tensor per state):
# ``prelude(module, args, rank) -> ((op type, inputs, feeds), ...)``, given the module, the number of positional
# arguments of the call and ``rank()`` (the rank of its first argument on the example, computed when asked).
# ``inputs`` are indices: -1 the call's first argument, k >= 0 the k-th node of the prelude; ``feeds``: the node is
# an input of the module's own node, after the call's arguments. Nodes of no fx node of their own: numbered,
# linked and hashed (graph_md5) as nndct's parser makes them, never run (the module computes them itself).
Prelude = Callable[[nn.Module, int, Callable[[], int]], Tuple[Tuple[str, Tuple[int, ...], bool], ...]]

# A function whose op type depends on its arguments (``F.hardtanh(x, 0, 6)`` is a ReLU6):
# ``rule(fx node) -> op type`` (the node's ``args``/``kwargs`` as called; an argument may be an fx node).
FunctionRule = Callable[[Any], str]

# An op's ONNX form: ``form(builder, fx node, module or None) -> ONNX name of the node's result``
# (``onnx_form.py``: what the builder offers, the refusal ``onnx_form.Unsupported``).
OnnxForm = Callable[[Any, Any, Optional[nn.Module]], str]


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
        function_rules: callable -> :data:`FunctionRule`, for functions whose type depends on arguments.
        methods: tensor method name -> op type (``call_method``).
        preludes: module class -> :data:`Prelude`: the nodes nndct's parser makes from what torch.jit traces
            inside the module's forward before its own op (``nn.LSTM``'s zero initial states).
        signatures: op type -> :data:`Signature` of its functional and method forms (the arguments by
            name, defaults filled; the xmodel lowering and the ONNX export read them).
        several: the float-operator kind of a call (``aten::<name>``, as ``fx.classify`` names it) -> ``(type,
            outputs)``: where the call returns several tensors (its result indexed, ``y[0]``, ``.values``),
            nndct's parser makes it the family's type ``type``, a node of ``outputs`` tensors
            (``x.max(dim)``: nndct_max, values and indices); the call's one-tensor form (``x.max()``)
            stays what the tables above make it. Each output of such a node gets an entry in
            quant_info (``TorchNndctQstrategy.create_quant_config``: one per ``out_tensors``).
        roles: role -> op types of this family that play it. Roles: ``conv`` (the 2-D convolutions),
            ``params`` (layers with weights the quantizer quantizes), ``bias_corr`` (nndct corrects their
            bias), ``norm`` (ops whose own module quantizes their weight and bias, those they have, at its first
            call and computes with them: a layer norm's gamma and beta, PReLU's slopes), ``arithmetic``
            (a Python number operand becomes an nndct_const node), ``binary`` (element-wise binary ops of
            tensors), ``const_operand`` (nndct's parser turns a number operand into a const node,
            numbered first: ``OptPass.transform_const_scalar_to_const_tensor``), ``operand_list`` (ops whose
            tensors are one list argument, each an input in list order, a tensor listed twice twice: nndct's
            ``in_nodes`` of ``torch.cat([y, y])``; ``fx/builder.py``). The quantization passes'
            per-op sets: ``fix_align_pool`` (a pool whose input takes its output's fix position where
            ``change_pool_input_fix`` is set: nndct's ``fix_pos_adjust.py``; ``sim/plan.py``), ``cle_act``
            and ``cle_pool`` (the ops cross-layer equalization passes through between a pair's two layers:
            nndct's ``cle`` pairs, ``optimization/cross_layer_equalization``; ``sim/cle.py``), ``adaquant``
            (the layers AdaQuant tunes: ``is_conv_like`` of nndct's ``adaquant.py``; ``sim/adaquant.py``,
            ``sim/finetune.py``), ``adaquant_pair_layer`` and ``adaquant_act`` (a layer and the activation
            AdaQuant tunes with it: ``collect_layer_act_pair``), ``fresh_output`` (with ``params``: ops whose
            output is a new tensor, never an alias of their input: ``sim/calib.py``), ``pad_fusion`` (the
            ops a zero pad folds into: nndct deploy's pad fusion; ``sim/xmodel/deploy.py``), ``reshape_like``
            (the ops nndct's deploy graph makes a reshape to their output shape: ``convert_reshapelike_to_reshape``;
            ``sim/xmodel/deploy.py``), ``quant_start`` and
            ``quant_end`` (where a quantized part starts and ends: QuantStub, DeQuantStub; nndct's
            ``_tag_quant_nodes``, ``fx/graph.py`` ``tag_quant_part``), ``input_scope`` (an output quantized as a
            network input is, fix position scope 1: ``calibrate_int``; ``sim/calib.py``).
        approximation: what the DPU computes instead of the float op (written once, in this unit), or
            :class:`Absent` with the reason (the op is exact, or never runs on the DPU).
        source: the upstream files the record's facts come from.
        onnx: op type -> its ONNX form (:data:`OnnxForm`), or :class:`Absent` with the reason the ONNX
            exporter (``pipeline/quantizers/sim/export/onnx``) writes none. The exporter resolves a node
            of the lowered test-mode model to its op type as the capture does (``fx.classify``: the
            ``modules``, ``module_rules``, ``functions`` and ``methods`` above) and calls the form with
            its builder, the fx node and the node's module (None for a function or method call). One
            form serves both flavours: float32 arithmetic giving torch's bits (opset 13), where the
            flavour-specific parts, quantized parameters (``b.param``), are written by the builder's
            flavour (``b.flavour``: exact or QDQ). A form raises ``onnx_form.Unsupported`` with the
            reason when one call's arguments cannot be written; an op type whose form is Absent is
            refused as "no ONNX lowering for this op".
        dpu_rule: op type -> :data:`DpuRule` (the inspector's names for it and its DPU-support rule: the
            verdict, the reasons in the real Inspector's words, the fixes, per target through the context
            given at call time), or :class:`Absent` with the reason (the inspector then prints the call's
            own name and gives its generic verdict: a float operator, or "not in the operator table").
            It may also hold ``aten::<name>`` types of calls the family's rule judges though nndct has
            no type for them (``aten::prelu``, the ``aten::chunk``/``aten::split`` that make slices).
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
        refusals: call -> ``refusal.Known``: the calls of the family some stage of this project refuses
            (the capture before calibration, the xmodel writer, the ONNX exporter), each with its true
            reason and what the real quantizer does with it (docs/xmodel.md#known-refusals). A call is
            keyed as the model calls it: an ``nn.Module`` class (exact), a function, a tensor method's
            name. ``fx/refusals.py`` asks these rows where a stage gives up (``explain``) and before the
            simulation runs (``refuse_in_simulation``). ``{}`` where the family's every call is taken. A
            family known only by refused calls (Conv1d, GroupNorm, ...) has no op types (``specs`` is
            empty) and its own unit.
        sim: op type -> ``sim_support.SimForm`` (``run(s)``: the calibration's float semantics of a node,
            where the real quantizer's module does not compute torch's own call: a DPU approximation;
            ``lower(lo)``: the node in the lowered test-mode model; the simulation's contexts are given
            at call time, ``ops/sim_support.py``), or ``sim_support.TORCH`` (an :class:`Absent`: "torch's
            call is the DPU's arithmetic") where the simulation runs the op's own torch call. Every type
            of the family has one (``pytorch_nndct/nn/modules``: the modules nndct swaps in).
        norm: op type -> ``sim_support.NormForm`` for the family's types of role ``norm``: how the node computes
            with its quantized weight and bias, and its module in the test-mode model (the simulation's graph
            and node given at call time). A ``norm`` type without one is a layer norm or PReLU, whose forms
            ``quantizers/sim/ops.py`` and ``lowered.py`` still hold.
        layer: op type -> ``sim_support.LayerForm`` for the family's types of role ``params``: the layer's call
            with given weight and bias, and the dims of bias correction's error mean. A ``params`` type without
            one is a 2-D conv, a linear or a batch norm, whose forms ``quantizers/sim/ops.py`` and ``calib.py``
            still hold.
    """
    family: str
    specs: Mapping[str, OpSpec]
    approximation: Union[str, Absent]
    source: str
    onnx: Mapping[str, Union[OnnxForm, Absent]]
    dpu_rule: Mapping[str, Union["DpuRule", Absent]]
    xmodel: Mapping[str, Any]
    xir_ops: Union[Mapping[str, Any], Absent]
    traced: Mapping[str, Tuple[str, ...]]
    refusals: Mapping[Any, Any]
    sim: Mapping[str, Any]
    modules: Mapping[type, str] = field(default_factory=dict)
    module_rules: Mapping[type, ModuleRule] = field(default_factory=dict)
    functions: Mapping[Callable[..., Any], str] = field(default_factory=dict)
    function_rules: Mapping[Callable[..., Any], FunctionRule] = field(default_factory=dict)
    methods: Mapping[str, str] = field(default_factory=dict)
    signatures: Mapping[str, Signature] = field(default_factory=dict)
    several: Mapping[str, Tuple[str, int]] = field(default_factory=dict)
    preludes: Mapping[type, Prelude] = field(default_factory=dict)
    roles: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)
    norm: Mapping[str, Any] = field(default_factory=dict)
    layer: Mapping[str, Any] = field(default_factory=dict)

    def types(self) -> Tuple[str, ...]:
        """The family's nndct op types, in order."""
        return tuple(self.specs)


def refusals_only(family: str, source: str, refusals: Mapping[Any, Any]) -> OpRecord:
    """The record of a unit that holds only calls some stage refuses (Conv1d, GroupNorm, ...): no op type of
    the capture's (the calls are refused, or run as generic float operators where no stage refuses them),
    so every other piece is empty, ``approximation`` and ``xir_ops`` declared Absent."""
    return OpRecord(family=family, specs={}, approximation=Absent("no op type: the calls are refused (refusals)"),
                    source=source, onnx={}, dpu_rule={}, xmodel={},
                    xir_ops=Absent("the xmodel writer writes no XIR op for it"), traced={}, refusals=refusals, sim={})
