"""Activations that run in float on the CPU (``nndct_sigmoid``, ``nndct_tanh``, ``aten::silu``,
``nndct_clamp``; ``nndct_GELU``, which nndct quantizes): quantized before a conv, left in float as the
model's output (docs/arithmetic.md#float-operators)."""
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .onnx_form import Unsupported, arg, clip, pow2

SIGMOID = "nndct_sigmoid"
TANH = "nndct_tanh"
SILU = "aten::silu"
CLAMP = "nndct_clamp"
GELU = "nndct_GELU"

_FLOAT = OpSpec("float", False, False, False)

def _element_table(b: Any, node: Any, mod: Any, standard: Callable[[], str]) -> str:
    """An element-wise float operator. When its input lies on a fake_quant grid (always, unless
    it follows an unquantized node): a Gather from the table of torch's own values for every code
    (the op as the model calls it, on all 2^b codes), so ONNX Runtime gives torch's bits in both
    flavours (its Sigmoid, Tanh and Erf differ from torch's in the last bits, which a float output
    shows and a following quantization can turn into 1 LSB). Otherwise ``standard()``, the
    standard ONNX op."""
    x = node.args[0]
    grid = b.grid(x) if len(node.args) == 1 and not node.kwargs else None
    if grid is None:
        return standard()
    fix_pos, bitwidth = grid
    lo, hi = -(2 ** (bitwidth - 1)), 2 ** (bitwidth - 1) - 1
    codes = torch.arange(lo, hi + 1, dtype=torch.float32) * pow2(-fix_pos)
    with torch.no_grad():
        if node.op == "call_module":
            values = mod(codes)
        elif node.op == "call_method":
            values = getattr(codes, node.target)()
        else:
            values = node.target(codes)
    if not isinstance(values, torch.Tensor) or values.shape != codes.shape or values.dtype != torch.float32:
        return standard()
    name = node.name
    index = b.op("Sub", [b.op("Mul", [b.tensor(x), b.scalar(name + "/amp", pow2(fix_pos))], name + "/scaled"),
                         b.scalar(name + "/lo", float(lo))], name + "/offset")
    index = b.cast(index, name + "/index", "int64")
    return b.op("Gather", [b.init(name + "/table", values.numpy()), index], name, axis=0)


def _onnx_unary(op_type: str) -> Callable[[Any, Any, Any], str]:
    """The form of Sigmoid / Tanh: the table of torch's values, else the standard ONNX ``op_type``."""
    def form(b: Any, node: Any, mod: Any) -> str:
        return _element_table(b, node, mod, lambda: b.op(op_type, [b.tensor(node.args[0])], node.name))
    return form


def _onnx_silu(b: Any, node: Any, mod: Any) -> str:
    """SiLU: the table of torch's values, else ``x * Sigmoid(x)``."""
    def standard() -> str:
        x = b.tensor(node.args[0])
        return b.op("Mul", [x, b.op("Sigmoid", [x], node.name + "/sigmoid")], node.name)
    return _element_table(b, node, mod, standard)


def _onnx_gelu(b: Any, node: Any, mod: Optional[nn.GELU]) -> str:
    """torch's exact GELU, ``x * 0.5 * (1 + erf(x * sqrt(1/2)))`` (the tanh form is refused)."""
    approximate = mod.approximate if mod is not None else b.static(node.kwargs.get("approximate", "none"))
    if approximate != "none":
        raise Unsupported("GELU(approximate=%r): only the exact erf form" % approximate)
    return _element_table(b, node, mod, lambda: _gelu_erf(b, node))


def _gelu_erf(b: Any, node: Any) -> str:
    x = b.tensor(node.args[0])
    e = b.op("Erf", [b.op("Mul", [x, b.scalar(node.name + "/rsqrt2", 0.7071067811865476)], node.name + "/scaled")],
             node.name + "/erf")
    one = b.op("Add", [e, b.scalar(node.name + "/one", 1.0)], node.name + "/one_plus")
    half = b.op("Mul", [x, b.scalar(node.name + "/half", 0.5)], node.name + "/half_x")
    return b.op("Mul", [half, one], node.name)


def _onnx_clamp(b: Any, node: Any, mod: None) -> str:
    """Clip to the call's min and max (numbers; either may be None)."""
    return clip(b, node, arg(node, 1, "min", None), arg(node, 2, "max", None))


RECORD = OpRecord(
    family="float_activation",
    specs={SIGMOID: _FLOAT, TANH: _FLOAT, SILU: _FLOAT, CLAMP: _FLOAT, GELU: OpSpec("float", True, False, False)},
    modules={nn.Sigmoid: SIGMOID, nn.Tanh: TANH, nn.GELU: GELU, nn.SiLU: SILU},
    functions={torch.sigmoid: SIGMOID, F.sigmoid: SIGMOID, torch.tanh: TANH, F.tanh: TANH, F.gelu: GELU,
               F.silu: SILU, torch.clamp: CLAMP, torch.clip: CLAMP},
    methods={"sigmoid": SIGMOID, "tanh": TANH, "clamp": CLAMP, "clip": CLAMP},
    signatures={GELU: (("input", "approximate"), {"approximate": "none"})},
    approximation=Absent("float operators on the CPU: torch's own call"),
    source="nndct_shared/base/key_names.py",
    onnx={SIGMOID: _onnx_unary("Sigmoid"), TANH: _onnx_unary("Tanh"), SILU: _onnx_silu, CLAMP: _onnx_clamp,
          GELU: _onnx_gelu},
)
