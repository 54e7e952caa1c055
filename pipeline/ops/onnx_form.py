"""What the units' ONNX forms (``record.OpRecord.onnx``) share: the refusal they raise, the reading of a
call's arguments, and the few pieces written the same way for several families (a layer's input,
weight and bias; a Clip; an alias; the table of an element-wise float operator). A support module: it
defines no record.

An ONNX form is called as ``form(b, node, mod) -> str`` by the ONNX exporter
(``pipeline/quantizers/sim/export/onnx``): ``b`` is its builder (``builder.Builder``: ``op``, ``init``,
``scalar``, ``ints``, ``index``, ``cast``, ``tensor``, ``operand``, ``static``, ``shape``,
``batch_dims``, ``grid``, ``param``, ``input_names``; the flavour, exact or QDQ, is ``b.flavour`` and
writes the quantization points and parameters, ``b.param``), ``node`` the ``torch.fx.Node`` of the
lowered test-mode model, ``mod`` its module (``call_module``) or None; it returns the ONNX name of the
node's result, or raises :class:`Unsupported` with the reason one argument cannot be written."""
from typing import Any, Callable, List

import torch
import torch.fx
from torch import nn

NO_LOWERING = "no ONNX lowering for this op"  # the exporter's reason for a call no form writes


class Unsupported(Exception):
    """One node cannot be written to ONNX; the message says why. Collected by the exporter, never shown
    alone."""


def arg(node: torch.fx.Node, index: int, name: str, default: Any = Unsupported) -> Any:
    """Argument ``name`` of a call, given by position ``index`` or by keyword.

    Raises:
        Unsupported: the argument is missing and has no ``default``."""
    if len(node.args) > index:
        return node.args[index]
    if name in node.kwargs:
        return node.kwargs[name]
    if default is Unsupported:
        raise Unsupported("argument %r is missing" % name)
    return default


def pow2(p: int) -> float:
    """``2.0 ** p``, exact in float32.

    Raises:
        Unsupported: ``p`` outside float32's normal exponent range [-126, 126]."""
    if not -126 <= p <= 126:
        raise Unsupported("fix_pos %d is outside float32's exponent range [-126, 126]" % p)
    return 2.0 ** p


def layer_inputs(b: Any, node: torch.fx.Node, mod: nn.Module) -> List[str]:
    """The ONNX inputs of a conv, transposed conv or linear module of the lowered model: its input, its
    weight (transposed for a Linear on a tensor of rank other than 2, for MatMul) and its bias when it
    has one, the parameters as the flavour writes them (``b.param``: checked on their 2^-fix_pos grid
    from the module's ``weight_fix_pos`` / ``bias_fix_pos`` / ``bitwidth``).

    Raises:
        Unsupported: more than the one input; a ``padding_mode`` other than zeros; the builder's refusals
            of the parameters."""
    if len(node.args) != 1 or node.kwargs:
        raise Unsupported("expected one input, got %d args and kwargs %s"
                          % (len(node.args), sorted(node.kwargs)))
    if getattr(mod, "padding_mode", "zeros") != "zeros":
        raise Unsupported("padding_mode %r (only 'zeros')" % mod.padding_mode)
    bits = getattr(mod, "bitwidth", None)
    inputs = [b.tensor(node.args[0]),
              b.param(node.target, "weight", mod.weight, getattr(mod, "weight_fix_pos", None), bits,
                      transpose=isinstance(mod, nn.Linear) and len(b.shape(node.args[0])) != 2)]
    if mod.bias is not None:
        inputs.append(b.param(node.target, "bias", mod.bias, getattr(mod, "bias_fix_pos", None), bits))
    return inputs


def clip(b: Any, node: torch.fx.Node, lo: Any, hi: Any) -> str:
    """``Clip(x, lo, hi)`` of the node's first argument; a bound None is left out (ONNX's optional input).

    Raises:
        Unsupported: a bound that is a tensor."""
    if isinstance(lo, torch.fx.Node) or isinstance(hi, torch.fx.Node):
        raise Unsupported("clamp bounds must be numbers, not tensors")
    inputs = [b.tensor(node.args[0]),
              "" if lo is None else b.operand(lo, node.name + "/min"),
              "" if hi is None else b.operand(hi, node.name + "/max")]
    while inputs[-1] == "":
        inputs.pop()
    return b.op("Clip", inputs, node.name)


def alias(b: Any, node: torch.fx.Node, mod: Any) -> str:
    """A node that is its first argument (``x.contiguous()``, Identity, Dropout in eval): no ONNX node."""
    return b.tensor(node.args[0])


def element_table(b: Any, node: Any, mod: Any, standard: Callable[[], str]) -> str:
    """An element-wise float operator. When its input lies on a fake_quant grid (always, unless
    it follows an unquantized node): a Gather from the table of torch's own values for every code
    (the op as the model calls it, on all 2^b codes), so ONNX Runtime gives torch's bits in both
    flavours (its Sigmoid, Tanh and Erf differ from torch's in the last bits, which a float output
    shows and a following quantization can turn into 1 LSB). Otherwise ``standard()``, the
    standard ONNX op (which may raise :class:`Unsupported` where ONNX Runtime would round otherwise).
    Used by the float activations' records and the exporter's generic element-wise calls."""
    x = node.args[0]
    grid = b.grid(x) if len(node.args) == 1 and node.kwargs in ({}, {"inplace": False}) else None
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
