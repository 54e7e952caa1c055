"""Write a lowered test-mode model (``torch.fx.GraphModule``) as ONNX, in two flavours.

The graph is walked node by node and every ONNX node is emitted with ``onnx.helper``;
``torch.onnx.export`` is not used (its exporter differs between torch 1.13 and 2.x, and it cannot
express the DPU's half_up rounding).

Input contract (the lowered test-mode model of the ``sim`` quantizer):

- ``pipeline.quantizers.fixpoint.fake_quant(x, fix_pos, bitwidth, method)`` is the only custom
  call; ``method`` is ``"half_up"`` (input and activations) or ``"std_round"``; it means
  ``q = clamp(R(x * 2^fix_pos), -2^(b-1), 2^(b-1) - 1)`` and ``x_hat = q * 2^-fix_pos``
  (vitis_ai_facts.md 2.1, 2.2).
- ``nn.Conv2d`` / ``nn.ConvTranspose2d`` / ``nn.Linear`` hold weights and bias that are already
  quantized (float32 values exactly ``q * 2^-fix_pos``) and carry the integer attributes
  ``weight_fix_pos``, ``bias_fix_pos`` and ``bitwidth``.
- everything else is a standard module, function or method listed in ``MODULE_HANDLERS``,
  ``FUNCTION_HANDLERS`` and ``METHOD_HANDLERS``; Python numbers are constants.
- attributes ``quant_info`` (the ``quant_info.json`` dict) and ``output_fix_pos`` (int or None).

Flavours (``FLAVOURS``):

- ``"exact"``: each fake_quant becomes ``v = Mul(x, 2^p)``, the rounding, ``Clip(-2^(b-1),
  2^(b-1)-1)`` and ``Mul(2^-p)``. half_up is ``r = Round(v)`` (half to even) plus 1 where
  ``v - r == 0.5``; std_round is ``Sign(v) * (Floor(|v|) + (|v| - Floor(|v|) >= 0.5))``. These
  are the rules of ``pipeline.quantizers.fixpoint`` (``round_half_up``, ``round_std``), exact for
  every float32 value, so ONNX Runtime reproduces the simulation bit for bit. The shortcut
  ``Floor(v + 0.5)`` is not used: for v = 0.5 - 2^-25 the addition rounds up to 1.0 and gives 1
  where the DPU kernel (``_vai_round_cpu``, facts 2.2) gives 0. Weights and bias are float32
  initializers holding the exact quantized values.
- ``"qdq"``: each fake_quant becomes ``QuantizeLinear -> DequantizeLinear`` (scale 2^-fix_pos,
  int8 zero point 0). QuantizeLinear rounds half to even (ONNX operator spec), the DPU half_up
  (ties toward +inf), so on a value exactly on a half-LSB tie the two differ by 1 LSB at that
  quantization point. Weights and bias are int8 code initializers followed by DequantizeLinear.
  The bias is int8 with its own scale 2^-bias_fix_pos, not int32 at scale s_in * s_w: the DPU keeps
  an 8-bit bias with its own fix_pos (facts 2.5) and ``shift_bias = w + i - b`` may be negative
  (facts 2.4), where an int32 code at s_in * s_w would not be an integer.

Every other operation is written the same way in both flavours, as float32 arithmetic whose
result is the one torch computes: average pooling is an exact window sum (a depthwise Conv with a
ones kernel) divided by the divisor (torch divides; multiplying by the reciprocal differs in the
last bit), global adaptive average pooling is ReduceSum then Div by H*W (torch's ``mean``), other
adaptive average pooling divides by kh then kw (as torch's kernel does), nearest resizing is two
Gathers with the source indices torch itself computes. The sums are exact when the summed values
lie on a power-of-two grid and every partial sum fits in float32's 24-bit significand, which holds
for the quantized operands of the contract; then the summation order of torch and ONNX Runtime
does not matter.

The ONNX file is opset 13, IR version 7 (loads with the onnx / onnxruntime of the Vitis AI 3.5
image and here), has a dynamic batch dimension ``N`` on its input ``input`` and its outputs
(``output``, or ``output_0``, ``output_1``, ...; ``_io`` is appended to these names when a layer
of the model already has one), and its bytes depend only on the graph: node and
tensor names come from the fx node names, the producer is fixed and there is no timestamp.
``metadata_props`` holds ``flavour``, ``rounding``, ``bias``, ``fix_pos`` (JSON table),
``output_fix_pos`` and ``quant_info``.
"""
import json
import operator
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from .. import __version__
from ..errors import ExportError
from ..fileio import write_bytes

OPSET = 13
IR_VERSION = 7
FLAVOURS = ("qdq", "exact")
PRODUCER_NAME = "vitis-pipeline"
INPUT_NAME = "input"
BATCH_DIM = "N"
FAKE_QUANT_MODULE = "pipeline.quantizers.fixpoint"
FAKE_QUANT_NAME = "fake_quant"
ROUNDING_METHODS = ("half_up", "std_round")

ROUNDING_NOTES = {
    "exact": (
        "bit-exact: v = x * 2^fix_pos; half_up (input and activations) is Round(v) (half to "
        "even) + 1 where v - Round(v) == 0.5, i.e. ties toward +inf; std_round is Sign(v) * "
        "(Floor(|v|) + (|v| - Floor(|v|) >= 0.5)), ties away from zero; then Clip to "
        "[-2^(b-1), 2^(b-1)-1] and Mul(2^-fix_pos). Same rules as "
        "pipeline.quantizers.fixpoint, exact for every float32 value, so ONNX Runtime "
        "reproduces the simulation exactly."),
    "qdq": (
        "QuantizeLinear rounds half to even (ONNX spec), the DPU rounds activations half_up "
        "(ties toward +inf) and weights std_round: a value exactly on a half-LSB tie can land "
        "1 LSB away from the DPU at that quantization point (more downstream when such "
        "differences add up). Weights and bias are exact integer codes."),
}
BIAS_NOTES = {
    "exact": "float32 initializer holding q * 2^-bias_fix_pos",
    "qdq": ("int8 codes + DequantizeLinear(scale 2^-bias_fix_pos): the DPU's 8-bit bias with its "
            "own fix_pos; int32 at s_in*s_w is not exact when bias_fix_pos > w + i"),
}


class _Unsupported(Exception):
    """One node cannot be written; the message says why. Collected, never shown alone."""


# --------------------------------------------------------------------------- recording


def _is_static(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return True
    if isinstance(value, (tuple, list)):  # torch.Size is a tuple
        return all(_is_static(v) for v in value)
    return False


def _describe(value: Any) -> Tuple[Any, ...]:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if _is_static(value):
        return ("value", value)
    return ("other", type(value).__name__)


class _Recorder(torch.fx.Interpreter):
    """Runs the graph and keeps, per node, what it produced: a tensor's shape and dtype, or a value."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.meta = {}  # type: Dict[str, Tuple[Any, ...]]

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        self.meta[n.name] = _describe(result)
        return result


def _record(gm: torch.fx.GraphModule, xs: Sequence[torch.Tensor]) -> Dict[str, Tuple[Any, ...]]:
    recorder = _Recorder(gm)
    with torch.no_grad():
        recorder.run(*xs)
    return recorder.meta


# --------------------------------------------------------------------------- builder


def _arg(node: torch.fx.Node, index: int, name: str, default: Any = _Unsupported) -> Any:
    """Argument ``name`` of a call, given by position ``index`` or by keyword."""
    if len(node.args) > index:
        return node.args[index]
    if name in node.kwargs:
        return node.kwargs[name]
    if default is _Unsupported:
        raise _Unsupported("argument %r is missing" % name)
    return default


def _pair(value: Any) -> Tuple[int, int]:
    if isinstance(value, (tuple, list)):
        return int(value[0]), int(value[1])
    return int(value), int(value)


def _pow2(p: int) -> float:
    if not -126 <= p <= 126:
        raise _Unsupported("fix_pos %d is outside float32's exponent range [-126, 126]" % p)
    return 2.0 ** p


class _Builder:
    """Collects ONNX nodes and initializers for one graph; names are derived from fx node names."""

    def __init__(self, gm: torch.fx.GraphModule, flavour: str,
                 meta1: Dict[str, Tuple[Any, ...]], meta2: Dict[str, Tuple[Any, ...]]) -> None:
        self.gm = gm
        self.flavour = flavour
        self.meta1 = meta1
        self.meta2 = meta2
        self.nodes = []  # type: List[Any]
        self.initializers = {}  # type: Dict[str, Any]
        self.names = {}  # type: Dict[str, str]
        self.input_names = {}  # type: Dict[str, str]
        self.failed = set()  # type: set
        self.fix_table = {"activations": {}, "params": {}}  # type: Dict[str, Dict[str, Any]]

    # -- emission helpers
    def op(self, op_type: str, inputs: Sequence[str], name: str, **attrs: Any) -> str:
        from onnx import helper
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name

    def init(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper
        if name not in self.initializers:
            self.initializers[name] = numpy_helper.from_array(np.ascontiguousarray(array), name)
        return name

    def scalar(self, name: str, value: float) -> str:
        return self.init(name, np.array(value, dtype=np.float32))

    def ints(self, name: str, values: Sequence[int]) -> str:
        return self.init(name, np.array(list(values), dtype=np.int64))

    # -- reading the recorded graph
    def shape(self, arg: Any) -> Tuple[int, ...]:
        if not isinstance(arg, torch.fx.Node) or self.meta1[arg.name][0] != "tensor":
            raise _Unsupported("expected a tensor operand, got %r" % (arg,))
        return self.meta1[arg.name][1]

    def batch_dims(self, arg: torch.fx.Node) -> List[int]:
        """Dimensions of a node's tensor whose size follows the batch size."""
        s1, s2 = self.meta1[arg.name][1], self.meta2[arg.name][1]
        return [i for i, (a, b) in enumerate(zip(s1, s2)) if a != b]

    def tensor(self, arg: Any) -> str:
        if isinstance(arg, torch.fx.Node) and arg.name in self.failed:
            return arg.name
        self.shape(arg)
        return self.names[arg.name]

    def static(self, arg: Any) -> Any:
        """A Python constant argument; a node yielding a value counts if the batch size does not change it."""
        if isinstance(arg, (tuple, list)):
            return type(arg)(self.static(a) for a in arg)
        if not isinstance(arg, torch.fx.Node):
            return arg
        m1, m2 = self.meta1[arg.name], self.meta2[arg.name]
        if m1[0] != "value":
            raise _Unsupported("argument %s must be a constant, it is a %s" % (arg.name, m1[0]))
        if m1 != m2:
            raise _Unsupported("argument %s depends on the batch size; only reshape-like ops may "
                               "use it" % arg.name)
        return m1[1]

    def operand(self, arg: Any, name: str) -> str:
        """A tensor operand, or a Python number turned into a float32 scalar initializer."""
        if isinstance(arg, torch.fx.Node):
            return self.tensor(arg)
        value = self.static(arg)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Unsupported("operand %r is neither a tensor nor a number" % (value,))
        return self.scalar(name, float(value))

    # -- quantization points and parameters
    def quantize(self, x: str, name: str, fix_pos: int, bitwidth: int, method: str) -> str:
        lo, hi = -(2 ** (bitwidth - 1)), 2 ** (bitwidth - 1) - 1
        if self.flavour == "exact":
            from onnx import TensorProto
            v = self.op("Mul", [x, self.scalar(name + "/amp", _pow2(fix_pos))], name + "/scaled")
            half = self.scalar(name + "/half", 0.5)
            if method == "half_up":  # Round is half-even; add 1 where it went down from a tie
                r = self.op("Round", [v], name + "/round")
                tie = self.op("Equal", [self.op("Sub", [v, r], name + "/frac"), half], name + "/is_tie")
                v = self.op("Add", [r, self.op("Cast", [tie], name + "/tie", to=TensorProto.FLOAT)],
                            name + "/half_up")
            else:  # std_round: sign(v) * (floor(|v|) + (|v| - floor(|v|) >= 0.5))
                a = self.op("Abs", [v], name + "/abs")
                f = self.op("Floor", [a], name + "/floor")
                up = self.op("GreaterOrEqual", [self.op("Sub", [a, f], name + "/frac"), half],
                             name + "/is_up")
                m = self.op("Add", [f, self.op("Cast", [up], name + "/up", to=TensorProto.FLOAT)],
                            name + "/magnitude")
                v = self.op("Mul", [self.op("Sign", [v], name + "/sign"), m], name + "/std_round")
            v = self.op("Clip", [v, self.scalar(name + "/qmin", lo), self.scalar(name + "/qmax", hi)],
                        name + "/clip")
            return self.op("Mul", [v, self.scalar(name + "/lsb", _pow2(-fix_pos))], name)
        if bitwidth > 8:
            raise _Unsupported("qdq flavour: opset-13 QuantizeLinear holds at most 8 bits, got "
                               "bitwidth %d; export the 'exact' flavour" % bitwidth)
        scale = self.scalar(name + "/scale", _pow2(-fix_pos))
        zero = self.init(name + "/zero_point", np.zeros((), dtype=np.int8))
        q = self.op("QuantizeLinear", [x, scale, zero], name + "/q")
        if bitwidth == 8:
            return self.op("DequantizeLinear", [q, scale, zero], name)
        dq = self.op("DequantizeLinear", [q, scale, zero], name + "/dq")
        return self.op("Clip", [dq, self.scalar(name + "/min", lo * _pow2(-fix_pos)),
                                self.scalar(name + "/max", hi * _pow2(-fix_pos))], name)

    def param(self, target: str, kind: str, value: torch.Tensor, fix_pos: Any, bitwidth: Any,
              transpose: bool = False) -> str:
        """A quantized weight or bias: float32 values (exact) or int8 codes + DequantizeLinear (qdq)."""
        for label, v in (("%s_fix_pos" % kind, fix_pos), ("bitwidth", bitwidth)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise _Unsupported("module %s: attribute %s must be an int, got %r" % (target, label, v))
        fix_pos, bitwidth = int(fix_pos), int(bitwidth)
        t = value.detach().cpu()
        if transpose:
            t = t.t()
        t = t.contiguous()
        if t.dtype != torch.float32:
            raise _Unsupported("module %s: %s is %s, expected float32" % (target, kind, t.dtype))
        codes = t.double() * _pow2(fix_pos)
        lo, hi = -(2 ** (bitwidth - 1)), 2 ** (bitwidth - 1) - 1
        if not bool(torch.isfinite(codes).all()) or bool((codes != codes.round()).any()):
            raise _Unsupported("module %s: %s is not on its 2^-%d grid (not quantized with "
                               "%s_fix_pos=%d)" % (target, kind, fix_pos, kind, fix_pos))
        if codes.numel() and (float(codes.min()) < lo or float(codes.max()) > hi):
            raise _Unsupported("module %s: %s codes span [%d, %d], outside the %d-bit range"
                               % (target, kind, codes.min(), codes.max(), bitwidth))
        entry = self.fix_table["params"].setdefault(target, {"bitwidth": bitwidth})
        entry["%s_fix_pos" % kind] = fix_pos
        name = "%s.%s%s" % (target, kind, ".T" if transpose else "")
        if self.flavour == "exact":
            return self.init(name, t.numpy())
        if bitwidth > 8:
            raise _Unsupported("qdq flavour: opset-13 DequantizeLinear of int8 holds at most 8 "
                               "bits, got bitwidth %d; export the 'exact' flavour" % bitwidth)
        if name + "/codes" not in self.initializers:  # a module called twice is written once
            self.init(name + "/codes", codes.to(torch.int8).contiguous().numpy())
            self.op("DequantizeLinear", [name + "/codes", self.scalar(name + "/scale", _pow2(-fix_pos)),
                                         self.init(name + "/zero_point", np.zeros((), np.int8))], name)
        return name


# --------------------------------------------------------------------------- handlers
# Each handler gets (builder, fx node, module or None) and returns the ONNX tensor name of the
# node's result. They raise _Unsupported with the reason when an argument cannot be written.


def _conv_weights(b: _Builder, node: torch.fx.Node, mod: nn.Module) -> List[str]:
    if len(node.args) != 1 or node.kwargs:
        raise _Unsupported("expected one input, got %d args and kwargs %s"
                           % (len(node.args), sorted(node.kwargs)))
    if getattr(mod, "padding_mode", "zeros") != "zeros":
        raise _Unsupported("padding_mode %r (only 'zeros')" % mod.padding_mode)
    bits = getattr(mod, "bitwidth", None)
    inputs = [b.tensor(node.args[0]),
              b.param(node.target, "weight", mod.weight, getattr(mod, "weight_fix_pos", None), bits,
                      transpose=isinstance(mod, nn.Linear) and len(b.shape(node.args[0])) != 2)]
    if mod.bias is not None:
        inputs.append(b.param(node.target, "bias", mod.bias, getattr(mod, "bias_fix_pos", None), bits))
    return inputs


def _conv(b: _Builder, node: torch.fx.Node, mod: nn.Conv2d) -> str:
    inputs = _conv_weights(b, node, mod)
    if isinstance(mod.padding, str):
        total = [d * (k - 1) if mod.padding == "same" else 0
                 for d, k in zip(mod.dilation, mod.kernel_size)]
        pads = [t // 2 for t in total] + [t - t // 2 for t in total]  # torch puts the odd pixel last
    else:
        pads = list(mod.padding) * 2
    return b.op("Conv", inputs, node.name, kernel_shape=list(mod.kernel_size), strides=list(mod.stride),
                pads=pads, dilations=list(mod.dilation), group=mod.groups)


def _conv_transpose(b: _Builder, node: torch.fx.Node, mod: nn.ConvTranspose2d) -> str:
    inputs = _conv_weights(b, node, mod)
    return b.op("ConvTranspose", inputs, node.name, kernel_shape=list(mod.kernel_size),
                strides=list(mod.stride), pads=list(mod.padding) * 2, dilations=list(mod.dilation),
                group=mod.groups, output_padding=list(mod.output_padding))


def _linear(b: _Builder, node: torch.fx.Node, mod: nn.Linear) -> str:
    inputs = _conv_weights(b, node, mod)
    if len(b.shape(node.args[0])) == 2:
        return b.op("Gemm", inputs, node.name, transB=1)
    y = b.op("MatMul", inputs[:2], node.name if len(inputs) == 2 else node.name + "/matmul")
    return y if len(inputs) == 2 else b.op("Add", [y, inputs[2]], node.name)


def _relu(b: _Builder, node: torch.fx.Node, mod: Optional[nn.Module]) -> str:
    return b.op("Relu", [b.tensor(node.args[0])], node.name)


def _clip(b: _Builder, node: torch.fx.Node, lo: Any, hi: Any) -> str:
    if isinstance(lo, torch.fx.Node) or isinstance(hi, torch.fx.Node):
        raise _Unsupported("clamp bounds must be numbers, not tensors")
    inputs = [b.tensor(node.args[0]),
              "" if lo is None else b.operand(lo, node.name + "/min"),
              "" if hi is None else b.operand(hi, node.name + "/max")]
    while inputs[-1] == "":
        inputs.pop()
    return b.op("Clip", inputs, node.name)


def _hardtanh(b: _Builder, node: torch.fx.Node, mod: nn.Hardtanh) -> str:
    return _clip(b, node, float(mod.min_val), float(mod.max_val))


def _relu6_fn(b: _Builder, node: torch.fx.Node, mod: None) -> str:
    return _clip(b, node, 0.0, 6.0)


def _clamp(b: _Builder, node: torch.fx.Node, mod: None) -> str:
    return _clip(b, node, _arg(node, 1, "min", None), _arg(node, 2, "max", None))


def _leaky(b: _Builder, node: torch.fx.Node, mod: Optional[nn.LeakyReLU]) -> str:
    slope = mod.negative_slope if mod is not None else b.static(_arg(node, 1, "negative_slope", 0.01))
    return b.op("LeakyRelu", [b.tensor(node.args[0])], node.name, alpha=float(slope))


def _one_input(node: torch.fx.Node, mod: Any) -> None:
    """A pooling module call takes its input only (functional forms carry their settings as args)."""
    if isinstance(mod, nn.Module) and (len(node.args) != 1 or node.kwargs):
        raise _Unsupported("expected one input")


def _functional(names: Sequence[str], defaults: Dict[str, Any]) -> Callable[..., str]:
    """Handler for F.max_pool2d / F.avg_pool2d / F.adaptive_avg_pool2d: the call's arguments after
    the input become the attributes of a module-like namespace, passed to the module's handler."""
    def wrap(handler: Callable[..., str]) -> Callable[..., str]:
        def functional(b: _Builder, node: torch.fx.Node, mod: None) -> str:
            params = types.SimpleNamespace(**{
                name: b.static(_arg(node, i + 1, name, defaults.get(name, _Unsupported)))
                for i, name in enumerate(names)})
            return handler(b, node, params)
        return functional
    return wrap


def _pool_geometry(b: _Builder, node: torch.fx.Node, mod: Any) -> Dict[str, Any]:
    """kernel/stride/pads/dilations of a 2-D pool; refuses ceil_mode when it changes the output."""
    _one_input(node, mod)
    kernel = _pair(mod.kernel_size)
    stride = _pair(mod.stride or mod.kernel_size)  # torch: stride None (or []) means the kernel
    pad = _pair(mod.padding)
    dil = _pair(getattr(mod, "dilation", 1))
    shape_in, shape_out = b.shape(node.args[0]), b.shape(node)
    if len(shape_in) != 4:
        raise _Unsupported("input is %d-D, expected 4-D NCHW" % len(shape_in))
    floor_out = tuple((shape_in[2 + i] + 2 * pad[i] - dil[i] * (kernel[i] - 1) - 1) // stride[i] + 1
                      for i in range(2))
    if tuple(shape_out[2:]) != floor_out:
        raise _Unsupported("output %s differs from the floor-mode output %s (ceil_mode)"
                           % (tuple(shape_out), floor_out))
    return {"kernel_shape": list(kernel), "strides": list(stride), "pads": list(pad) * 2,
            "dilations": list(dil)}


def _maxpool(b: _Builder, node: torch.fx.Node, mod: nn.MaxPool2d) -> str:
    if mod.return_indices:
        raise _Unsupported("return_indices=True")
    return b.op("MaxPool", [b.tensor(node.args[0])], node.name, **_pool_geometry(b, node, mod))


def _window_sum(b: _Builder, node: torch.fx.Node, kernel: Sequence[int], stride: Sequence[int],
                pads: Sequence[int]) -> str:
    """Exact per-channel window sums: a depthwise Conv with a ones kernel (no rounding on grid values)."""
    channels = b.shape(node.args[0])[1]
    ones = b.init(node.name + "/window", np.ones((channels, 1) + tuple(kernel), dtype=np.float32))
    return b.op("Conv", [b.tensor(node.args[0]), ones], node.name + "/sum", kernel_shape=list(kernel),
                strides=list(stride), pads=list(pads), group=channels)


def _avgpool(b: _Builder, node: torch.fx.Node, mod: nn.AvgPool2d) -> str:
    geo = _pool_geometry(b, node, mod)
    total = b.op("Div", [_window_sum(b, node, geo["kernel_shape"], geo["strides"], geo["pads"]),
                         node.name + "/divisor"], node.name)
    kh, kw = geo["kernel_shape"]
    if mod.divisor_override:
        b.scalar(node.name + "/divisor", float(mod.divisor_override))
    elif mod.count_include_pad or not any(geo["pads"]):
        b.scalar(node.name + "/divisor", float(kh * kw))
    else:  # torch divides by the number of input pixels inside each window
        h, w = b.shape(node.args[0])[2:]
        counts = F.conv2d(torch.ones(1, 1, h, w, dtype=torch.float64),
                          torch.ones(1, 1, kh, kw, dtype=torch.float64), stride=geo["strides"],
                          padding=geo["pads"][:2])
        b.init(node.name + "/divisor", counts.float().contiguous().numpy())
    return total


def _adaptive_avgpool(b: _Builder, node: torch.fx.Node, mod: nn.AdaptiveAvgPool2d) -> str:
    _one_input(node, mod)
    shape = b.shape(node.args[0])
    if len(shape) != 4:
        raise _Unsupported("input is %d-D, expected 4-D NCHW" % len(shape))
    h, w = shape[2:]
    oh, ow = b.shape(node)[2:]
    if (oh, ow) == (1, 1):  # torch computes mean(): sum, then one division by h*w
        total = b.op("ReduceSum", [b.tensor(node.args[0]), b.ints(node.name + "/axes", [2, 3])],
                     node.name + "/sum", keepdims=1)
        return b.op("Div", [total, b.scalar(node.name + "/divisor", float(h * w))], node.name)
    if h % oh or w % ow:
        raise _Unsupported("output %s does not divide the input %s (uneven windows)" % ((oh, ow), (h, w)))
    kh, kw = h // oh, w // ow  # torch's kernel divides by kh, then by kw
    total = _window_sum(b, node, (kh, kw), (kh, kw), (0, 0, 0, 0))
    total = b.op("Div", [total, b.scalar(node.name + "/kh", float(kh))], node.name + "/div_kh")
    return b.op("Div", [total, b.scalar(node.name + "/kw", float(kw))], node.name)


def _nearest(b: _Builder, node: torch.fx.Node, mode: str, call: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """Nearest resize as Gather(rows) then Gather(cols), with the source indices torch computes."""
    if mode not in ("nearest", "nearest-exact"):
        raise _Unsupported("mode %r (only 'nearest' and 'nearest-exact' resize exactly)" % mode)
    shape = b.shape(node.args[0])
    if len(shape) != 4:
        raise _Unsupported("input is %d-D, expected 4-D NCHW" % len(shape))
    h, w = shape[2:]
    rows = torch.arange(h, dtype=torch.float32).view(h, 1).expand(h, w)
    cols = torch.arange(w, dtype=torch.float32).view(1, w).expand(h, w)
    with torch.no_grad():
        probe = call(torch.stack([rows, cols]).unsqueeze(0).contiguous())
    r, c = probe[0, 0, :, 0], probe[0, 1, 0, :]
    if (tuple(probe.shape[2:]) != tuple(b.shape(node)[2:]) or not bool((probe[0, 0] == r[:, None]).all())
            or not bool((probe[0, 1] == c[None, :]).all())):
        raise _Unsupported("the resize is not a separable row/column selection")
    y = b.op("Gather", [b.tensor(node.args[0]), b.ints(node.name + "/rows", r.long().tolist())],
             node.name + "/rows_gathered", axis=2)
    return b.op("Gather", [y, b.ints(node.name + "/cols", c.long().tolist())], node.name, axis=3)


def _upsample(b: _Builder, node: torch.fx.Node, mod: nn.Upsample) -> str:
    return _nearest(b, node, mod.mode, mod)


def _interpolate(b: _Builder, node: torch.fx.Node, mod: None) -> str:
    args = b.static(tuple(node.args[1:]))
    kwargs = {k: b.static(v) for k, v in node.kwargs.items()}
    mode = _arg(node, 3, "mode", "nearest")
    return _nearest(b, node, mode, lambda t: F.interpolate(t, *args, **kwargs))


def _reshape(b: _Builder, node: torch.fx.Node, mod: Optional[nn.Module]) -> str:
    """flatten / view / reshape / squeeze / unsqueeze: Reshape to the recorded output shape."""
    target = list(b.shape(node))
    batch = b.batch_dims(node)
    if len(batch) > 1:
        raise _Unsupported("the batch size reaches %d output dimensions" % len(batch))
    for i in batch:
        target[i] = -1
    return b.op("Reshape", [b.tensor(node.args[0]), b.ints(node.name + "/shape", target)], node.name)


def _permute(b: _Builder, node: torch.fx.Node, mod: None) -> str:
    if len(node.args) == 2 and isinstance(node.args[1], (tuple, list)):
        dims = node.args[1]
    else:
        dims = node.args[1:] or _arg(node, 1, "dims")
    rank = len(b.shape(node))
    perm = [int(d) % rank for d in b.static(tuple(dims))]
    return b.op("Transpose", [b.tensor(node.args[0])], node.name, perm=perm)


def _transpose(b: _Builder, node: torch.fx.Node, mod: None) -> str:
    rank = len(b.shape(node))
    d0, d1 = (int(b.static(_arg(node, i, n))) % rank for i, n in ((1, "dim0"), (2, "dim1")))
    perm = list(range(rank))
    perm[d0], perm[d1] = d1, d0
    return b.op("Transpose", [b.tensor(node.args[0])], node.name, perm=perm)


def _alias(b: _Builder, node: torch.fx.Node, mod: Optional[nn.Module]) -> str:
    return b.tensor(node.args[0])


def _cat(b: _Builder, node: torch.fx.Node, mod: None) -> str:
    tensors = _arg(node, 0, "tensors")
    dim = int(b.static(_arg(node, 1, "dim", 0)))
    return b.op("Concat", [b.tensor(t) for t in tensors], node.name, axis=dim % len(b.shape(node)))


def _binary(op_type: str) -> Callable[[_Builder, torch.fx.Node, None], str]:
    def handler(b: _Builder, node: torch.fx.Node, mod: None) -> str:
        if b.static(node.kwargs.get("alpha", 1)) != 1 or node.kwargs.get("rounding_mode") is not None:
            raise _Unsupported("alpha != 1 or a rounding_mode")
        a, c = _arg(node, 0, "input"), _arg(node, 1, "other")
        return b.op(op_type, [b.operand(a, node.name + "/a"), b.operand(c, node.name + "/b")], node.name)
    return handler


def _fake_quant(b: _Builder, node: torch.fx.Node, mod: None) -> str:
    x = b.tensor(_arg(node, 0, "x"))
    fix_pos, bitwidth, method = (b.static(_arg(node, i, n))
                                 for i, n in ((1, "fix_pos"), (2, "bitwidth"), (3, "method")))
    if isinstance(fix_pos, bool) or not isinstance(fix_pos, int) or isinstance(bitwidth, bool) \
            or not isinstance(bitwidth, int) or bitwidth < 2 or method not in ROUNDING_METHODS:
        raise _Unsupported("fake_quant(fix_pos=%r, bitwidth=%r, method=%r): expected ints and a "
                           "method in %s" % (fix_pos, bitwidth, method, ROUNDING_METHODS))
    b.fix_table["activations"][node.name] = {"fix_pos": fix_pos, "bitwidth": bitwidth, "method": method}
    return b.quantize(x, node.name, fix_pos, bitwidth, method)


def _unary(op_type: str) -> Callable[[_Builder, torch.fx.Node, Any], str]:
    def handler(b: _Builder, node: torch.fx.Node, mod: Any) -> str:
        return b.op(op_type, [b.tensor(node.args[0])], node.name)
    return handler


def _silu(b: _Builder, node: torch.fx.Node, mod: Any) -> str:
    x = b.tensor(node.args[0])
    return b.op("Mul", [x, b.op("Sigmoid", [x], node.name + "/sigmoid")], node.name)


def _gelu(b: _Builder, node: torch.fx.Node, mod: Optional[nn.GELU]) -> str:
    """torch's exact GELU, ``x * 0.5 * (1 + erf(x * sqrt(1/2)))`` (the tanh form is refused)."""
    approximate = mod.approximate if mod is not None else b.static(node.kwargs.get("approximate", "none"))
    if approximate != "none":
        raise _Unsupported("GELU(approximate=%r): only the exact erf form" % approximate)
    x = b.tensor(node.args[0])
    e = b.op("Erf", [b.op("Mul", [x, b.scalar(node.name + "/rsqrt2", 0.7071067811865476)], node.name + "/scaled")],
             node.name + "/erf")
    one = b.op("Add", [e, b.scalar(node.name + "/one", 1.0)], node.name + "/one_plus")
    half = b.op("Mul", [x, b.scalar(node.name + "/half", 0.5)], node.name + "/half_x")
    return b.op("Mul", [half, one], node.name)


def _softmax(b: _Builder, node: torch.fx.Node, mod: Optional[nn.Softmax]) -> str:
    dim = mod.dim if mod is not None else b.static(_arg(node, 1, "dim"))
    if dim is None:
        raise _Unsupported("softmax without dim")
    return b.op("Softmax", [b.tensor(node.args[0])], node.name, axis=int(dim) % len(b.shape(node.args[0])))


def _mean(b: _Builder, node: torch.fx.Node, mod: None) -> str:
    """``mean(dim, keepdim)`` as ReduceSum then Div by the count: torch's sum and division, exact
    on quantized inputs (their partial sums are exact in any order)."""
    rank = len(b.shape(node.args[0]))
    dim = b.static(_arg(node, 1, "dim", None))
    dims = list(range(rank)) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    axes = sorted(int(d) % rank for d in dims)
    keep = int(bool(b.static(_arg(node, 2, "keepdim", False))))
    if node.kwargs.get("dtype") is not None:
        raise _Unsupported("mean with a dtype")
    count = 1
    for a in axes:
        count *= b.shape(node.args[0])[a]
    total = b.op("ReduceSum", [b.tensor(node.args[0]), b.ints(node.name + "/axes", axes)], node.name + "/sum",
                 keepdims=keep)
    return b.op("Div", [total, b.scalar(node.name + "/count", float(count))], node.name)


def _pad(b: _Builder, node: torch.fx.Node, mod: Optional[nn.ZeroPad2d]) -> str:
    """Constant padding (F.pad mode 'constant', nn.ZeroPad2d) as Pad; torch lists the last
    dimension first, ONNX every dimension's begins then ends."""
    if mod is not None:
        pad, value, mode = list(mod.padding), 0.0, "constant"
    else:
        pad = list(b.static(_arg(node, 1, "pad")))
        mode = b.static(_arg(node, 2, "mode", "constant"))
        value = b.static(_arg(node, 3, "value", None))
    if mode != "constant":
        raise _Unsupported("pad mode %r (only 'constant')" % mode)
    rank = len(b.shape(node.args[0]))
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    if min(begins + ends) < 0:
        raise _Unsupported("negative padding")
    return b.op("Pad", [b.tensor(node.args[0]), b.ints(node.name + "/pads", begins + ends),
                        b.scalar(node.name + "/value", float(value or 0.0))], node.name, mode="constant")


def _batch_norm(b: _Builder, node: torch.fx.Node, mod: nn.modules.batchnorm._BatchNorm) -> str:
    """An unfused BatchNorm of the lowered model (quantized weight and bias, mean 0, var 1, eps 0:
    ``x * weight + bias``) as BatchNormalization."""
    if len(node.args) != 1 or node.kwargs:
        raise _Unsupported("expected one input")
    if mod.eps != 0.0 or bool((mod.running_mean != 0).any()) or bool((mod.running_var != 1).any()):
        raise _Unsupported("BatchNorm statistics other than mean 0, var 1, eps 0 (the quantizer's converted form)")
    bits = getattr(mod, "bitwidth", None)
    w = b.param(node.target, "weight", mod.weight, getattr(mod, "weight_fix_pos", None), bits)
    bias = b.param(node.target, "bias", mod.bias, getattr(mod, "bias_fix_pos", None), bits)
    c = int(mod.num_features)
    return b.op("BatchNormalization", [b.tensor(node.args[0]), w, bias,
                                       b.init(node.name + "/mean", np.zeros(c, np.float32)),
                                       b.init(node.name + "/var", np.ones(c, np.float32))],
                node.name, epsilon=0.0)


SPLIT_FUNCTIONS = (torch.chunk, torch.split)
SPLIT_METHODS = ("chunk", "split")


def _is_split(node: Any) -> bool:
    return isinstance(node, torch.fx.Node) and (
        (node.op == "call_function" and node.target in SPLIT_FUNCTIONS)
        or (node.op == "call_method" and node.target in SPLIT_METHODS))


def _getitem(b: _Builder, node: torch.fx.Node, mod: None) -> str:
    """One piece of a chunk/split (Slice along its dim, bounds from the traced sizes)."""
    base, index = node.args
    if not _is_split(base):
        raise _Unsupported("indexing a tensor (only the pieces of chunk/split)")
    x = base.args[0]
    size = b.shape(x)
    dim = int(b.static(_arg(base, 2, "dim", 0))) % len(size)
    how = b.static(_arg(base, 1, "chunks" if base.target in ("chunk", torch.chunk) else "split_size_or_sections"))
    if base.target in ("chunk", torch.chunk):
        step = -(-size[dim] // int(how))
        bounds = [(i, min(i + step, size[dim])) for i in range(0, size[dim], step)]
    elif isinstance(how, int):
        bounds = [(i, min(i + how, size[dim])) for i in range(0, size[dim], how)]
    else:
        starts = np.cumsum([0] + list(how)).tolist()
        bounds = list(zip(starts[:-1], starts[1:]))
    start, end = bounds[int(b.static(index))]
    if dim in b.batch_dims(x):
        raise _Unsupported("splitting the batch dimension")
    return b.op("Slice", [b.tensor(x), b.ints(node.name + "/starts", [start]), b.ints(node.name + "/ends", [end]),
                          b.ints(node.name + "/axes", [dim])], node.name)


# Literal registries: what the exporter writes. Exact type / object / name matches only.
MODULE_HANDLERS = {
    nn.Conv2d: _conv,
    nn.ConvTranspose2d: _conv_transpose,
    nn.Linear: _linear,
    nn.ReLU: _relu,
    nn.ReLU6: _hardtanh,
    nn.Hardtanh: _hardtanh,
    nn.LeakyReLU: _leaky,
    nn.MaxPool2d: _maxpool,
    nn.AvgPool2d: _avgpool,
    nn.AdaptiveAvgPool2d: _adaptive_avgpool,
    nn.Upsample: _upsample,
    nn.Flatten: _reshape,
    nn.Identity: _alias,
    nn.Sigmoid: _unary("Sigmoid"),
    nn.Tanh: _unary("Tanh"),
    nn.SiLU: _silu,
    nn.GELU: _gelu,
    nn.Softmax: _softmax,
    nn.ZeroPad2d: _pad,
    nn.BatchNorm1d: _batch_norm,
    nn.BatchNorm2d: _batch_norm,
}  # type: Dict[type, Callable[..., str]]

FUNCTION_HANDLERS = {
    operator.add: _binary("Add"), torch.add: _binary("Add"),
    operator.sub: _binary("Sub"), torch.sub: _binary("Sub"),
    operator.mul: _binary("Mul"), torch.mul: _binary("Mul"),
    operator.truediv: _binary("Div"), torch.div: _binary("Div"),
    torch.cat: _cat,
    torch.clamp: _clamp,
    torch.relu: _relu, F.relu: _relu,
    F.relu6: _relu6_fn,
    F.leaky_relu: _leaky,
    F.interpolate: _interpolate,
    F.max_pool2d: _functional(("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
                              {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False,
                               "return_indices": False})(_maxpool),
    F.avg_pool2d: _functional(("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                               "divisor_override"),
                              {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                               "divisor_override": None})(_avgpool),
    F.adaptive_avg_pool2d: _functional(("output_size",), {})(_adaptive_avgpool),
    torch.flatten: _reshape, torch.reshape: _reshape,
    torch.squeeze: _reshape, torch.unsqueeze: _reshape,
    torch.permute: _permute, torch.transpose: _transpose,
    torch.sigmoid: _unary("Sigmoid"), torch.tanh: _unary("Tanh"), F.silu: _silu, F.gelu: _gelu,
    torch.softmax: _softmax, F.softmax: _softmax, torch.mean: _mean, F.pad: _pad,
    operator.getitem: _getitem,
}  # type: Dict[Any, Callable[..., str]]

METHOD_HANDLERS = {
    "add": _binary("Add"), "sub": _binary("Sub"), "mul": _binary("Mul"), "div": _binary("Div"),
    "clamp": _clamp, "relu": _relu,
    "flatten": _reshape, "view": _reshape, "reshape": _reshape,
    "squeeze": _reshape, "unsqueeze": _reshape,
    "permute": _permute, "transpose": _transpose,
    "contiguous": _alias,
    "sigmoid": _unary("Sigmoid"), "tanh": _unary("Tanh"), "softmax": _softmax, "mean": _mean,
}  # type: Dict[str, Callable[..., str]]


def _is_fake_quant(target: Any) -> bool:
    return (getattr(target, "__module__", None) == FAKE_QUANT_MODULE
            and getattr(target, "__name__", None) == FAKE_QUANT_NAME)


def _target_name(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return "%s (%s)" % (node.target, type(gm.get_submodule(node.target)).__name__)
    if callable(node.target):
        return "%s.%s" % (getattr(node.target, "__module__", None) or "",
                          getattr(node.target, "__name__", repr(node.target)))
    return str(node.target)


def _handler(gm: torch.fx.GraphModule, node: torch.fx.Node) -> Tuple[Optional[Callable[..., str]], Any]:
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        return MODULE_HANDLERS.get(type(mod)), mod
    if node.op == "call_function":
        if _is_fake_quant(node.target):
            return _fake_quant, None
        try:
            return FUNCTION_HANDLERS.get(node.target), None
        except TypeError:  # an unhashable target
            return None, None
    if node.op == "call_method":
        return METHOD_HANDLERS.get(node.target), None
    return None, None


# --------------------------------------------------------------------------- graph walk


def _emit(b: _Builder, node: torch.fx.Node) -> None:
    meta = b.meta1.get(node.name, ("other", "nothing"))
    if node.op == "placeholder":
        b.names[node.name] = b.input_names[node.name]
        return
    if node.op == "get_attr":
        value = _get_attr(b.gm, node.target)
        if isinstance(value, torch.Tensor):
            if value.dtype != torch.float32:
                raise _Unsupported("constant tensor of dtype %s, expected float32" % value.dtype)
            b.names[node.name] = b.init(node.name, value.detach().cpu().contiguous().numpy())
        return
    if meta[0] == "value":
        return  # a Python value (constant or shape): read by the nodes that use it
    if _is_split(node):
        return  # a tuple of pieces: each getitem of it is a Slice
    if meta[0] != "tensor":
        raise _Unsupported("produces a %s, not one tensor" % meta[1])
    if meta[2] != torch.float32:
        raise _Unsupported("produces dtype %s, expected float32" % meta[2])
    handler, mod = _handler(b.gm, node)
    if handler is None:
        raise _Unsupported("no ONNX lowering for this op")
    b.names[node.name] = handler(b, node, mod)


def _get_attr(gm: torch.nn.Module, target: str) -> Any:
    value = gm  # type: Any
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _outputs(node: Optional[torch.fx.Node]) -> List[torch.fx.Node]:
    out = node.args[0] if node is not None else None
    if isinstance(out, torch.fx.Node):
        return [out]
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.fx.Node) for o in out):
        return list(out)
    raise _Unsupported("the model must return a tensor or a tuple/list of tensors, got %r" % (out,))


def _free_name(name: str, taken: set) -> str:
    """``name``, or ``name_io``, ``name_io1``, ... : the first not in ``taken``."""
    candidate, i = name, 0
    while candidate in taken:
        candidate = "%s_io%s" % (name, i or "")
        i += 1
    return candidate


def _check_example(example1: Any) -> None:
    if not isinstance(example1, torch.Tensor):
        raise ExportError("export needs the example input as a torch.Tensor, got %s"
                          % type(example1).__name__)
    if example1.dim() < 1 or example1.shape[0] != 1:
        raise ExportError(
            "export needs a batch-1 example input (the DPU export traces batch size 1, "
            "vitis_ai_facts.md 1.4 item 3; public case P04), got shape %s; pass one sample of "
            "the same shape, for example batch[:1].clone()" % (tuple(example1.shape),))
    if example1.dtype != torch.float32 or not example1.is_contiguous():
        raise ExportError("export needs a contiguous float32 example input (the quantizer "
                          "boundary's owned copy), got dtype %s, contiguous=%s"
                          % (example1.dtype, example1.is_contiguous()))


def _build_model(gm: torch.fx.GraphModule, examples: Tuple[torch.Tensor, ...], flavour: str) -> Any:
    """The ONNX ``ModelProto`` of ``gm`` (checked with ``onnx.checker``); raises ExportError."""
    import onnx
    from onnx import TensorProto, helper

    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(examples):
        raise ExportError("export: the model takes %d inputs (%s), got %d example tensors"
                          % (len(placeholders), ", ".join(placeholders), len(examples)))
    try:
        meta1 = _record(gm, [e.clone() for e in examples])
        meta2 = _record(gm, [torch.cat([e, e], 0) for e in examples])  # finds the batch-dependent dims
    except Exception as exc:
        raise ExportError("the model failed on the batch-1 example input %s (and on a batch of two "
                          "copies of it): %s: %s" % (", ".join(str(tuple(e.shape)) for e in examples),
                                                     type(exc).__name__, exc)) from exc
    b = _Builder(gm, flavour, meta1, meta2)
    # fx node names are identifiers and every other tensor name holds a '/' or a '.', so graph
    # input/output names only have to avoid the fx node names (a layer called `output`, say)
    taken = {n.name for n in gm.graph.nodes if n.op not in ("placeholder", "output")}
    for i, name in enumerate(placeholders):
        b.input_names[name] = _free_name(INPUT_NAME if len(placeholders) == 1 else "%s_%d" % (INPUT_NAME, i), taken)
    problems = []  # type: List[str]
    output_node = None
    for node in gm.graph.nodes:
        if node.op == "output":
            output_node = node
            continue
        try:
            _emit(b, node)
        except _Unsupported as exc:
            problems.append("%s (op=%s, target=%s): %s" % (node.name, node.op, _target_name(gm, node), exc))
            b.failed.add(node.name)
    outputs = []
    try:
        results = _outputs(output_node)
        for i, result in enumerate(results):
            name = _free_name("output" if len(results) == 1 else "output_%d" % i, taken)
            b.op("Identity", [b.tensor(result)], name)
            dims = [BATCH_DIM if d in b.batch_dims(result) else s
                    for d, s in enumerate(b.shape(result))]  # type: List[Any]
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, dims))
    except _Unsupported as exc:
        problems.append("output: %s" % exc)
    if problems:
        raise ExportError(
            "cannot export the model to ONNX (%s flavour): %d node(s) are unsupported: %s. Supported: "
            "fake_quant, modules %s, functions %s, methods %s"
            % (flavour, len(problems), "; ".join(problems),
               ", ".join(sorted(t.__name__ for t in MODULE_HANDLERS)),
               ", ".join(sorted({getattr(f, "__name__", str(f)) for f in FUNCTION_HANDLERS})),
               ", ".join(sorted(METHOD_HANDLERS))))
    graph = helper.make_graph(
        b.nodes, "quantized_%s" % flavour,
        [helper.make_tensor_value_info(b.input_names[p], TensorProto.FLOAT, [BATCH_DIM] + list(e.shape[1:]))
         for p, e in zip(placeholders, examples)],
        outputs, initializer=list(b.initializers.values()))
    model = helper.make_model(graph, producer_name=PRODUCER_NAME, producer_version=__version__,
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    output_fix_pos = getattr(gm, "output_fix_pos", None)
    output_fix_pos = None if output_fix_pos is None else int(output_fix_pos)
    table = dict(b.fix_table, output_fix_pos=output_fix_pos)
    props = [("flavour", flavour), ("rounding", ROUNDING_NOTES[flavour]), ("bias", BIAS_NOTES[flavour]),
             ("fix_pos", json.dumps(table, sort_keys=True)),
             ("output_fix_pos", json.dumps(output_fix_pos)),
             ("quant_info", json.dumps(getattr(gm, "quant_info", None), sort_keys=True, default=str))]
    for key, value in props:
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # onnx raises its own ValidationError / InferenceError
        raise ExportError("the written ONNX graph fails onnx.checker (%s flavour): %s; this is an "
                          "exporter bug, please report it with the model" % (flavour, exc)) from exc
    return model


def export_onnx(gm: torch.fx.GraphModule, example1: Any, out_path: str, flavour: str) -> str:
    """Write the lowered test-mode model ``gm`` as ONNX (opset 13) to ``out_path``; returns ``out_path``.

    Args:
        gm: the lowered test-mode model (module docstring: the contract it must follow). It is
            run twice on CPU under ``torch.no_grad`` (on the example and on two copies of it, to
            find which output dimensions follow the batch size); it is not modified.
        example1: float32, contiguous, batch-1 example input of one sample's shape, e.g. NCHW
            (1, C, H, W), or a tuple of them (one per model input). Never written (the runs use
            copies).
        out_path: destination file; written atomically (temporary name in the same folder, then
            ``os.replace``); the folder is created if missing.
        flavour: ``"exact"`` (bit-exact with the simulation, half_up ties toward +inf) or
            ``"qdq"`` (QuantizeLinear/DequantizeLinear; rounds half to even, so it can be 1 LSB
            off the DPU on ties at each quantization point).

    The file has input ``input`` (N, *example1.shape[1:]) float32 (``input_0``, ``input_1``, ...
    for several) with a dynamic batch dimension ``N``, output ``output`` (or ``output_<i>`` for several) float32, and the same bytes
    for the same graph and the same onnx version.

    Raises:
        ExportError: unknown flavour; example not batch 1 (public case P04), not float32 or not
            contiguous; the model fails on the example; unsupported nodes (all of them listed at
            once with name, op and target); weights off their 2^-fix_pos grid; qdq with a bit width
            above 8; a graph that fails ``onnx.checker``.
    """
    if flavour not in FLAVOURS:
        raise ExportError("ONNX flavour must be one of %s, got %r" % (FLAVOURS, flavour))
    examples = tuple(example1) if isinstance(example1, (tuple, list)) else (example1,)
    for e in examples:
        _check_example(e)
    model = _build_model(gm, examples, flavour)
    return write_bytes(out_path, model.SerializeToString(deterministic=True))
