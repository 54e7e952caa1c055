"""Which ONNX form writes each node of the lowered test-mode model.

A node is resolved to its op type as the graph capture does (``fx.classify.classify``: the op records'
module, module-rule, function and method tables, ``pipeline.ops``) and written by that op's form in its
record (``OpRecord.onnx``: ``form(builder, fx node, module or None) -> ONNX name``; an op whose form is
Absent gets "no ONNX lowering for this op"). The calls below are no op of the op list (no nndct type:
the capture gives them ``aten::<name>``, or they are the quantizer's own call), so their forms are the
exporter's own, in this module's small literal tables: the quantization point (``fake_quant``, written
by the flavour), the attention the lowered model inlines (refused), ``torch.roll`` and ``x.unflatten``
(written as a reshape), and the generic element-wise float operators (``torch.abs``, ``x.exp()``,
``F.selu``, eval-mode ``F.alpha_dropout``: ``xir.aten_ops.ELEMENTWISE``, the kinds the interpreter
computes from the type name alone)."""
from typing import Any, Callable, Dict, Optional, Set, Tuple

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from ..... import ops as t
from .....fx.attention import SCALED_DOT_PRODUCT_ATTENTION
from .....fx.classify import classify
from .....fx.rewrites import REMOVED_FUNCTIONS, REMOVED_MODULES
from .....ops.onnx_form import alias, element_table
from .....ops.record import Absent
from .....xir.aten_ops import ELEMENTWISE
from .builder import ROUNDING_METHODS, Builder, Unsupported, arg, is_fake_quant


def _attention(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """``F.scaled_dot_product_attention`` (``fx.attention.SCALED_DOT_PRODUCT_ATTENTION``): refused. torch's CPU kernel (a blocked, online softmax
    with vectorized exp, normalizing after the second product) and any ONNX composition
    (MatMul, Softmax, MatMul) round differently in the last bits, and the result is quantized right
    after it (its output entry), so ONNX Runtime cannot reproduce the quantizer bit for bit."""
    raise Unsupported("scaled_dot_product_attention (nn.MultiheadAttention) has no bit-exact ONNX "
                      "form: torch's CPU attention kernel and an ONNX MatMul/Softmax/MatMul round "
                      "differently in the last bits before the quantization that follows it")


def _roll(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """``torch.roll(x, shifts, dims)``: per dimension a Gather by the rolled positions (data moves
    only: exact)."""
    shifts, dims = b.static(arg(node, 1, "shifts")), b.static(arg(node, 2, "dims", None))
    if dims is None:
        raise Unsupported("roll without dims (of the flattened tensor)")
    shifts = shifts if isinstance(shifts, (tuple, list)) else (shifts,)
    dims = dims if isinstance(dims, (tuple, list)) else (dims,)
    size = b.shape(node.args[0])
    y = b.tensor(node.args[0])
    for k, (shift, dim) in enumerate(zip(shifts, dims)):
        dim = int(dim) % len(size)
        if dim in b.batch_dims(node.args[0]):
            raise Unsupported("rolling the batch dimension")
        index = [(i - int(shift)) % size[dim] for i in range(size[dim])]
        name = node.name if k == len(dims) - 1 else "%s/dim%d" % (node.name, dim)
        y = b.op("Gather", [y, b.ints("%s/index%d" % (node.name, dim), index)], name, axis=dim)
    return y


def _fake_quant(b: Builder, node: torch.fx.Node, mod: None) -> str:
    x = b.tensor(arg(node, 0, "x"))
    fix_pos, bitwidth, method = (b.static(arg(node, i, n))
                                 for i, n in ((1, "fix_pos"), (2, "bitwidth"), (3, "method")))
    if isinstance(fix_pos, bool) or not isinstance(fix_pos, int) or isinstance(bitwidth, bool) \
            or not isinstance(bitwidth, int) or bitwidth < 2 or method not in ROUNDING_METHODS:
        raise Unsupported("fake_quant(fix_pos=%r, bitwidth=%r, method=%r): expected ints and a "
                           "method in %s" % (fix_pos, bitwidth, method, ROUNDING_METHODS))
    b.fix_table["activations"][node.name] = {"fix_pos": fix_pos, "bitwidth": bitwidth, "method": method}
    return b.quantize(x, node.name, fix_pos, bitwidth, method)


# ONNX ops that give torch's float32 bits on any input (sign-bit and rounding ops; square as one product).
# Elsewhere ONNX Runtime's kernels and torch's vectorised ones differ: on a million normal float32 values
# (onnxruntime 1.32 CPU, torch 2.13) Exp in 6.6% of them, Log 18%, Sin 14%, Erf 12%, Sqrt 17%, Tanh 59%;
# Sign(NaN) is NaN where torch.sign gives 0. Off a quantization grid those calls are refused.
_EXACT_ONNX = {"abs": "Abs", "neg": "Neg", "floor": "Floor", "ceil": "Ceil"}


def _absent(reason: str) -> Callable[..., str]:
    """The form of an op whose record declares it has none: refused with the record's reason."""
    def form(b: Builder, node: torch.fx.Node, mod: Any) -> str:
        raise Unsupported("no ONNX form: %s" % reason)
    return form


def _elementwise(kind: str) -> Callable[..., str]:
    """The form of a generic element-wise float operator ``kind`` (``xir.aten_ops.ELEMENTWISE``): on a
    quantized input the table of torch's own values for every code (``ops.onnx_form.element_table``:
    exact in both flavours); off a grid the standard ONNX op where it is exact (``_EXACT_ONNX``; ``square``
    as one Mul), else refused with the reason."""
    def standard(b: Builder, node: torch.fx.Node) -> str:
        x = b.tensor(node.args[0])
        if kind == "square":
            return b.op("Mul", [x, x], node.name)
        if kind not in _EXACT_ONNX:
            raise Unsupported("%s of a value off any quantization grid (it follows an unquantized op): ONNX "
                              "Runtime's %s rounds otherwise than torch's in the last bits" % (kind, kind))
        return b.op(_EXACT_ONNX[kind], [x], node.name)

    def form(b: Builder, node: torch.fx.Node, mod: None) -> str:
        if len(node.args) != 1 or node.kwargs not in ({}, {"inplace": False}):
            raise Unsupported("%s with arguments other than the tensor: %d args, kwargs %s"
                              % (kind, len(node.args), sorted(node.kwargs)))
        return element_table(b, node, mod, lambda: standard(b, node))
    return form


def _alpha_dropout(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """``F.alpha_dropout`` / ``F.feature_alpha_dropout`` in eval mode (``training=False``, as
    ``nn.AlphaDropout`` calls it in a test-mode model): its input, no ONNX node.

    Raises:
        Unsupported: ``training=True`` (random: no test-mode export has it)."""
    if b.static(arg(node, 2, "training", False)) is not False:
        raise Unsupported("%s with training=True (random masks): export the model in eval()" % node.target.__name__)
    return alias(b, node, mod)


_DROPOUTS = {"alpha_dropout": F.alpha_dropout, "feature_alpha_dropout": F.feature_alpha_dropout}

# The exporter's own forms: calls that are no op of the op list (function / method name).
OWN_FUNCTIONS = {SCALED_DOT_PRODUCT_ATTENTION: _attention, torch.roll: _roll}  # type: Dict[Any, Callable[..., str]]
OWN_FUNCTIONS.update({fn: _elementwise(kind) for kind, fn in ELEMENTWISE.items() if kind not in _DROPOUTS
                      and fn not in t.FUNCTION_OPS and fn not in t.FUNCTION_RULES})  # a unit's call: its form
OWN_FUNCTIONS.update({fn: _alpha_dropout for fn in _DROPOUTS.values()})
OWN_METHODS = {"unflatten": t.RECORD_OF[t.RESHAPE].onnx[t.RESHAPE]}  # type: Dict[str, Callable[..., str]]
OWN_METHODS.update({kind: _elementwise(kind) for kind in ELEMENTWISE if kind not in _DROPOUTS
                    and kind not in t.METHOD_OPS and callable(getattr(torch.Tensor, kind, None))})


def form_of(op: str) -> Optional[Callable[..., str]]:
    """The ONNX form of op type ``op`` (its record's), or None: no record, or its form is Absent."""
    record = t.RECORD_OF.get(op)
    form = record.onnx[op] if record is not None else None
    return None if isinstance(form, Absent) else form


def target_name(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return "%s (%s)" % (node.target, type(gm.get_submodule(node.target)).__name__)
    if callable(node.target):
        return "%s.%s" % (getattr(node.target, "__module__", None) or "",
                          getattr(node.target, "__name__", repr(node.target)))
    return str(node.target)


def handler_of(gm: torch.fx.GraphModule, node: torch.fx.Node) -> Tuple[Optional[Callable[..., str]], Any]:
    """The form that writes ``node`` and the module it calls (None for a function or method), or
    (None, module) when nothing writes it."""
    if node.op not in ("call_module", "call_function", "call_method"):
        return None, None
    mod = gm.get_submodule(node.target) if node.op == "call_module" else None
    if node.op == "call_function" and is_fake_quant(node.target):
        return _fake_quant, None
    try:
        op = classify(gm, node, strict=False)
    except TypeError:  # an unhashable target
        return None, None
    if op in t.RECORD_OF:
        form = t.RECORD_OF[op].onnx[op]
        return (_absent(form.reason) if isinstance(form, Absent) else form), mod
    if node.op == "call_module":
        return None, mod
    if node.op == "call_function":
        return OWN_FUNCTIONS.get(node.target), None
    return OWN_METHODS.get(node.target), None


def supported() -> Tuple[Set[str], Set[str], Set[str]]:
    """The names of the module classes, functions and methods some form writes (for the error message)."""
    modules = {cls.__name__ for r in t.RECORDS for cls, op in r.modules.items() if form_of(op)}
    modules |= {cls.__name__ for r in t.RECORDS for cls in r.module_rules if any(form_of(op) for op in r.specs)}
    functions = {getattr(f, "__name__", str(f)) for r in t.RECORDS for f, op in r.functions.items() if form_of(op)}
    functions |= {getattr(f, "__name__", str(f)) for r in t.RECORDS for f in r.function_rules
                  if any(form_of(op) for op in r.specs)}
    methods = {m for r in t.RECORDS for m, op in r.methods.items() if form_of(op)}
    if form_of(t.IDENTITY):  # the capture's removed calls (dropout, identity) are IDENTITY
        modules |= {cls.__name__ for cls in REMOVED_MODULES}
        functions |= {f.__name__ for f in REMOVED_FUNCTIONS}
    functions |= {getattr(f, "__name__", str(f)) for f in OWN_FUNCTIONS}
    methods |= set(OWN_METHODS)
    return modules, functions, methods
