"""Activations that run in float on the CPU (``nndct_sigmoid``, ``nndct_tanh``, ``aten::silu``,
``nndct_clamp``, ``nndct_log_softmax``; ``nndct_GELU`` and ``nndct_mish``, which nndct quantizes): quantized
before a conv, left in float as the model's output (docs/arithmetic.md#float-operators)."""
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .dpu_activation import where_it_runs
from .dpu_support import Fix, Verdict, cpu_verdict, tail_fix
from .onnx_form import Unsupported, arg, clip, element_table
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import IN, TO_NCHW, TO_NHWC, CustomKernel, OpDef, XirOp, like_input, one, unary
from .xmodel_support import XmodelForm, custom, custom_with_attrs, no_attrs, simple

SIGMOID = "nndct_sigmoid"
TANH = "nndct_tanh"
SILU = "aten::silu"
CLAMP = "nndct_clamp"
GELU = "nndct_GELU"
MISH = "nndct_mish"
LOG_SOFTMAX = "nndct_log_softmax"


# CPU-only activations and the conversion the quantizer offers for each (docs/arithmetic.md#optional-conversions).
_CONVERSIONS = {
    "silu": ("hswish", "SiLU -> HardSwish (quant config key convert_silu_to_hswish)"),
    "sigmoid": ("hsigmoid", "sigmoid -> HardSigmoid (option --nndct_convert_sigmoid_to_hsigmoid)"),
}


# The DPU activation nearest to each CPU-only one, and the module that computes it (the fix).
_NEAREST = {"silu": ("hswish", "nn.SiLU() -> nn.Hardswish()  # or F.silu(x) -> F.hardswish(x)"),
            "sigmoid": ("hsigmoid", "nn.Sigmoid() -> nn.Hardsigmoid()  # or torch.sigmoid(x) -> F.hardsigmoid(x)"),
            "gelu": ("hswish", "nn.GELU() -> nn.Hardswish()  # a different curve: retrain")}


def cpu_activation(node: Any, ctx: Any) -> Verdict:
    """sigmoid, SiLU, tanh, GELU: in no engine's nonlinear or ALU types of any target here, so on
    the CPU; where the quantizer offers a conversion, the note says whether the converted op would
    run on the DPU of this target."""
    reason = "{} can't be assigned to DPU: no engine of {} has it (nonlinear types: {}).".format(
        node.op, ctx.target.name, ", ".join(ctx.target.engines.conv.nonlinear))
    fixes = [tail_fix(node, ctx)]
    if node.op in _NEAREST:
        replacement, code = _NEAREST[node.op]
        where = where_it_runs(replacement, node, ctx)
        if where is not None:
            fixes.insert(0, Fix("replace it with the DPU's {}: the op then {} (a piecewise-linear approximation: "
                                "check the accuracy).".format(replacement, where), code, exact=False))
    conversion = _CONVERSIONS.get(node.op)
    if conversion is None:
        return cpu_verdict(reason, fixes=fixes)
    replacement, text = conversion
    where = where_it_runs(replacement, node, ctx) or "would still run on the CPU"
    return cpu_verdict(reason, changes=["the quantizer offers {}; after it, the op {} on {} (accuracy "
                                 "changes: check it).".format(text, where, ctx.target.name)], fixes=fixes)


_FLOAT = OpSpec("float", False, False, False)


def _onnx_unary(op_type: str) -> Callable[[Any, Any, Any], str]:
    """The form of Sigmoid / Tanh: the table of torch's values, else the standard ONNX ``op_type``."""
    def form(b: Any, node: Any, mod: Any) -> str:
        return element_table(b, node, mod, lambda: b.op(op_type, [b.tensor(node.args[0])], node.name))
    return form


def _onnx_silu(b: Any, node: Any, mod: Any) -> str:
    """SiLU: the table of torch's values, else ``x * Sigmoid(x)``."""
    def standard() -> str:
        x = b.tensor(node.args[0])
        return b.op("Mul", [x, b.op("Sigmoid", [x], node.name + "/sigmoid")], node.name)
    return element_table(b, node, mod, standard)


def _onnx_gelu(b: Any, node: Any, mod: Optional[nn.GELU]) -> str:
    """torch's exact GELU, ``x * 0.5 * (1 + erf(x * sqrt(1/2)))`` (the tanh form is refused)."""
    approximate = mod.approximate if mod is not None else b.static(node.kwargs.get("approximate", "none"))
    if approximate != "none":
        raise Unsupported("GELU(approximate=%r): only the exact erf form" % approximate)
    return element_table(b, node, mod, lambda: _gelu_erf(b, node))


def _gelu_erf(b: Any, node: Any) -> str:
    x = b.tensor(node.args[0])
    e = b.op("Erf", [b.op("Mul", [x, b.scalar(node.name + "/rsqrt2", 0.7071067811865476)], node.name + "/scaled")],
             node.name + "/erf")
    one = b.op("Add", [e, b.scalar(node.name + "/one", 1.0)], node.name + "/one_plus")
    half = b.op("Mul", [x, b.scalar(node.name + "/half", 0.5)], node.name + "/half_x")
    return b.op("Mul", [half, one], node.name)


def _onnx_mish(b: Any, node: Any, mod: Any) -> str:
    """Mish: the table of torch's values, else ``x * Tanh(Softplus(x))``."""
    def standard() -> str:
        x = b.tensor(node.args[0])
        soft = b.op("Softplus", [x], node.name + "/softplus")
        return b.op("Mul", [x, b.op("Tanh", [soft], node.name + "/tanh")], node.name)
    return element_table(b, node, mod, standard)


def _onnx_log_softmax(b: Any, node: Any, mod: Optional[nn.LogSoftmax]) -> str:
    """LogSoftmax, the standard op, along the dim, where a quantization follows it; a float output (a classifier
    head's log-probabilities: nndct_log_softmax is no quantizable op) is refused: ONNX Runtime's LogSoftmax and
    torch's CPU kernel differ in the last bit of some values."""
    dim = mod.dim if mod is not None else b.static(arg(node, 1, "dim", None))
    if dim is None:
        raise Unsupported("log_softmax without dim")
    if not any(b.grid(user) is not None for user in node.users):
        raise Unsupported("log_softmax whose output stays float (not quantized after it, as a classifier head's): "
                          "ONNX Runtime's LogSoftmax differs from torch's in the last bit of some values")
    return b.op("LogSoftmax", [b.tensor(node.args[0])], node.name, axis=int(dim) % len(b.shape(node.args[0])))


def _onnx_clamp(b: Any, node: Any, mod: None) -> str:
    """Clip to the call's min and max (numbers; either may be None)."""
    return clip(b, node, arg(node, 1, "min", None), arg(node, 2, "max", None))


def _lower_gelu(lo, node) -> dict:
    """``approximate`` quoted, as nndct writes it (``'none'`` or ``'tanh'``)."""
    m = lo.module(node)
    approximate = m.approximate if m is not None else lo.call_args(node)["approximate"]
    return {"approximate": "'%s'" % approximate}


def _lower_log_softmax(lo, node) -> dict:
    """The dimension (``axis``, the model's NCHW one: nndct's layout pass does not move it)."""
    m = lo.module(node)
    return {"axis": m.dim if m is not None else lo.call_args(node)["dim"]}


def _log_softmax_kernel(op: Any, xs: Any) -> torch.Tensor:
    """``nndct_log_softmax {axis}``: ``F.log_softmax`` over ``axis``, the model's dim (``_lower_log_softmax``). The
    file holds a 4-D value NHWC, laid out as its neighbours; the interpreter keeps such a value as an NHWC view
    of the simulation's NCHW memory, so the call runs on that NCHW tensor (bit for bit the simulation's) and
    comes back as its NHWC view (also where size-1 dims make both readings contiguous: ``[1, 1, 1, C]``, NHWC
    as nndct lays it out). A 4-D value held as it is (a model's channels-last tensor) and any other rank is
    the model's tensor itself."""
    x = xs[0]
    axis = int(op.attr("axis"))
    if x.dim() == 4 and (x.permute(TO_NCHW).is_contiguous() or not x.is_contiguous()):
        return F.log_softmax(x.permute(TO_NCHW), axis).permute(TO_NHWC)
    return F.log_softmax(x, axis)


def _run_gelu(run, op, ins):
    """``F.gelu`` with ``approximate`` (``'none'`` or ``'tanh'``, quotes included as nndct writes it)."""
    approximate = str(op.attr("approximate", "none")).strip("'\"")
    return F.gelu(one(ins), approximate=approximate)


RECORD = OpRecord(
    family="float_activation",
    specs={SIGMOID: _FLOAT, TANH: _FLOAT, SILU: _FLOAT, CLAMP: _FLOAT, GELU: OpSpec("float", True, False, False),
           MISH: OpSpec("float", True, False, False), LOG_SOFTMAX: _FLOAT},  # GELU, MISH: in QUANTIZABLE_OPS
    modules={nn.Sigmoid: SIGMOID, nn.Tanh: TANH, nn.GELU: GELU, nn.SiLU: SILU, nn.Mish: MISH,
             nn.LogSoftmax: LOG_SOFTMAX},
    functions={torch.sigmoid: SIGMOID, F.sigmoid: SIGMOID, torch.tanh: TANH, F.tanh: TANH, F.gelu: GELU,
               F.silu: SILU, torch.clamp: CLAMP, torch.clip: CLAMP, F.mish: MISH, F.log_softmax: LOG_SOFTMAX,
               torch.log_softmax: LOG_SOFTMAX},
    methods={"sigmoid": SIGMOID, "tanh": TANH, "clamp": CLAMP, "clip": CLAMP, "log_softmax": LOG_SOFTMAX},
    signatures={GELU: (("input", "approximate"), {"approximate": "none"}),
                LOG_SOFTMAX: (("input", "dim"), {"dim": None})},
    approximation=Absent("float operators on the CPU: torch's own call"),
    source="nndct_shared/base/key_names.py",
    onnx={SIGMOID: _onnx_unary("Sigmoid"), TANH: _onnx_unary("Tanh"), SILU: _onnx_silu, CLAMP: _onnx_clamp,
          GELU: _onnx_gelu, MISH: _onnx_mish, LOG_SOFTMAX: _onnx_log_softmax},
    dpu_rule={SIGMOID: DpuRule(("sigmoid",), cpu_activation, True), TANH: DpuRule(("tanh",), cpu_activation, True),
              SILU: DpuRule(("silu",), cpu_activation, True), CLAMP: Absent("a float operator of the quantizer"),
              GELU: DpuRule(("gelu",), cpu_activation, True), MISH: DpuRule(("mish",), cpu_activation, True),
              LOG_SOFTMAX: Absent("a float operator of the quantizer")},
    # silu and clamp: custom ops (types XIR does not define), as the real quantizer writes them
    xmodel={SIGMOID: XmodelForm(no_attrs, simple("sigmoid")), TANH: XmodelForm(no_attrs, simple("tanh")),
            SILU: XmodelForm(no_attrs, custom), CLAMP: XmodelForm(no_attrs, custom),
            GELU: XmodelForm(_lower_gelu, simple("gelu", ("approximate",))),
            # nndct types XIR does not define: custom ops, laid out as their neighbours (not aten::)
            MISH: XmodelForm(no_attrs, custom), LOG_SOFTMAX: XmodelForm(_lower_log_softmax, custom_with_attrs)},
    xir_ops={"sigmoid": XirOp(OpDef("sigmoid", IN, (), like_input), unary(torch.sigmoid), "sigmoid"),
             "tanh": XirOp(OpDef("tanh", IN, (), like_input), unary(torch.tanh), "tanh"),
             "gelu": XirOp(OpDef("gelu", IN, (), like_input), _run_gelu, "gelu")},
    # the interpreter's fallbacks for silu and mish (the caller's float_ops first); nn.SiLU(inplace=True) is
    # traced as the float operator aten::silu_, written the same way
    custom_kernels={SILU: CustomKernel(lambda op, xs: F.silu(xs[0]), False),
                    "aten::silu_": CustomKernel(lambda op, xs: F.silu(xs[0]), False),
                    MISH: CustomKernel(lambda op, xs: F.mish(xs[0]), False),
                    CLAMP: Absent("the file carries no bounds (nndct_clamp's min and max): the caller's float_ops "
                                  "(the simulation's call) compute it"),
                    LOG_SOFTMAX: CustomKernel(_log_softmax_kernel, True)},
    traced={SIGMOID: ("sigmoid",), TANH: ("tanh",), GELU: ("gelu",), CLAMP: ("clamp",), SILU: ("silu",),
            MISH: ("mish",), LOG_SOFTMAX: ("log_softmax",)},
    refusals={},
    sim=dict.fromkeys((SIGMOID, TANH, SILU, CLAMP, GELU, MISH, LOG_SOFTMAX), TORCH),
)
