"""The ONNX graph builder: records what each fx node produces, then collects ONNX nodes and
initializers for one graph (names derived from fx node names). Flavour-independent: quantization
points and parameters are written by the flavour (``flavours.py``)."""
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.fx

from .....ops.onnx_form import Unsupported, arg, pow2

__all__ = ["OPSET", "IR_VERSION", "Builder", "Unsupported", "arg", "pow2", "is_fake_quant", "record"]

OPSET = 13
IR_VERSION = 7
PRODUCER_NAME = "vitis-pipeline"
INPUT_NAME = "input"
BATCH_DIM = "N"
ROUNDING_METHODS = ("half_up", "std_round")
FAKE_QUANT_MODULE = "pipeline.fixpoint"
FAKE_QUANT_NAME = "fake_quant"


def is_fake_quant(target: Any) -> bool:
    """True for ``pipeline.fixpoint.fake_quant`` (matched by name: the exporter does
    not import the quantizer)."""
    return (getattr(target, "__module__", None) == FAKE_QUANT_MODULE
            and getattr(target, "__name__", None) == FAKE_QUANT_NAME)


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


def record(gm: torch.fx.GraphModule, xs: Sequence[torch.Tensor]) -> Dict[str, Tuple[Any, ...]]:
    recorder = _Recorder(gm)
    with torch.no_grad():
        recorder.run(*xs)
    return recorder.meta


# --------------------------------------------------------------------------- builder


class Builder:
    """Collects ONNX nodes and initializers for one graph; names are derived from fx node names."""

    def __init__(self, gm: torch.fx.GraphModule, flavour: Any,
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
        self.independent = set()  # type: set  # nodes no input reaches (fold.py): not emitted
        self.folded = {}  # type: Dict[str, torch.Tensor]  # their values, as dependent nodes read them
        self.fix_table = {"activations": {}, "params": {}}  # type: Dict[str, Dict[str, Any]]

    # -- emission helpers
    def op(self, op_type: str, inputs: Sequence[str], name: str, **attrs: Any) -> str:
        from onnx import helper
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name

    def init(self, name: str, array: np.ndarray) -> str:
        """An initializer of ``array``'s shape, 0-dim kept (``np.ascontiguousarray`` would make it 1-D):
        a QuantizeLinear scale of shape [1] is per-axis by the ONNX spec, and ONNX Runtime 1.16's
        QLinear fusions refuse it ("Scale and Zero-point must be a scalar")."""
        from onnx import numpy_helper
        if name not in self.initializers:
            array = np.asarray(array)
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            self.initializers[name] = numpy_helper.from_array(array, name)
        return name

    def scalar(self, name: str, value: float) -> str:
        """A 0-dim float32 initializer."""
        return self.init(name, np.array(value, dtype=np.float32))

    def index(self, name: str, value: int) -> str:
        """A 0-dim int64 initializer (a Gather by it drops the axis)."""
        return self.init(name, np.array(int(value), dtype=np.int64))

    def ints(self, name: str, values: Sequence[int]) -> str:
        return self.init(name, np.array(list(values), dtype=np.int64))

    def cast(self, x: str, name: str, to: str) -> str:
        """``Cast`` of ``x`` to ``to``: "float32", "float64" or "int64"."""
        from onnx import TensorProto
        dtype = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "int64": TensorProto.INT64}[to]
        return self.op("Cast", [x], name, to=dtype)

    # -- reading the recorded graph
    def shape(self, arg: Any) -> Tuple[int, ...]:
        if not isinstance(arg, torch.fx.Node) or self.meta1[arg.name][0] != "tensor":
            raise Unsupported("expected a tensor operand, got %r" % (arg,))
        return self.meta1[arg.name][1]

    def batch_dims(self, arg: torch.fx.Node) -> List[int]:
        """Dimensions of a node's tensor whose size follows the batch size."""
        s1, s2 = self.meta1[arg.name][1], self.meta2[arg.name][1]
        return [i for i, (a, b) in enumerate(zip(s1, s2)) if a != b]

    def tensor(self, arg: Any) -> str:
        if isinstance(arg, torch.fx.Node) and arg.name in self.failed:
            return arg.name
        self.shape(arg)
        if arg.name not in self.names and arg.name in self.folded:  # an input-independent tensor
            self.names[arg.name] = self.init(arg.name + "/folded", self.folded[arg.name].cpu().contiguous().numpy())
        return self.names[arg.name]

    def static(self, arg: Any) -> Any:
        """A Python constant argument; a node yielding a value counts if the batch size does not change it."""
        if isinstance(arg, (tuple, list)):
            return type(arg)(self.static(a) for a in arg)
        if not isinstance(arg, torch.fx.Node):
            return arg
        m1, m2 = self.meta1[arg.name], self.meta2[arg.name]
        if m1[0] != "value":
            raise Unsupported("argument %s must be a constant, it is a %s" % (arg.name, m1[0]))
        if m1 != m2:
            raise Unsupported("argument %s depends on the batch size; only reshape-like ops may "
                               "use it" % arg.name)
        return m1[1]

    def grid(self, x: Any) -> Optional[Tuple[int, int]]:
        """``(fix_pos, bitwidth)`` when tensor ``x`` is a fake_quant's output (its values lie on that
        grid), else None."""
        if not (isinstance(x, torch.fx.Node) and x.op == "call_function" and is_fake_quant(x.target)):
            return None
        fix_pos, bitwidth = self.static(arg(x, 1, "fix_pos")), self.static(arg(x, 2, "bitwidth"))
        if isinstance(fix_pos, int) and isinstance(bitwidth, int) and 2 <= bitwidth <= 16:
            return fix_pos, bitwidth
        return None

    def operand(self, arg: Any, name: str) -> str:
        """A tensor operand, or a Python number turned into a float32 scalar initializer."""
        if isinstance(arg, torch.fx.Node):
            return self.tensor(arg)
        value = self.static(arg)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Unsupported("operand %r is neither a tensor nor a number" % (value,))
        return self.scalar(name, float(value))

    # -- quantization points and parameters
    def quantize(self, x: str, name: str, fix_pos: int, bitwidth: int, method: str) -> str:
        """A fake_quant point, as the flavour writes it."""
        return self.flavour.quantize(self, x, name, fix_pos, bitwidth, method)

    def param(self, target: str, kind: str, value: torch.Tensor, fix_pos: Any, bitwidth: Any,
              transpose: bool = False) -> str:
        """A quantized weight or bias, checked on its grid, written as the flavour writes parameters.
        A float one (``fix_pos`` None: a layer outside the model's quantized parts, or under quant_off; the
        module's ``float_part`` says which) is refused, named."""
        why = getattr(getattr(self.gm, target, None), "float_part", None)
        if fix_pos is None and why:
            raise Unsupported("module %s: its %s is float (%s); the ONNX exports write quantized layers only"
                              % (target, kind, why))
        for label, v in (("%s_fix_pos" % kind, fix_pos), ("bitwidth", bitwidth)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise Unsupported("module %s: attribute %s must be an int, got %r" % (target, label, v))
        fix_pos, bitwidth = int(fix_pos), int(bitwidth)
        t = value.detach().cpu()
        if transpose:
            t = t.t()
        t = t.contiguous()
        if t.dtype != torch.float32:
            raise Unsupported("module %s: %s is %s, expected float32" % (target, kind, t.dtype))
        codes = t.double() * pow2(fix_pos)
        lo, hi = -(2 ** (bitwidth - 1)), 2 ** (bitwidth - 1) - 1
        if not bool(torch.isfinite(codes).all()) or bool((codes != codes.round()).any()):
            raise Unsupported("module %s: %s is not on its 2^-%d grid (not quantized with "
                               "%s_fix_pos=%d)" % (target, kind, fix_pos, kind, fix_pos))
        if codes.numel() and (float(codes.min()) < lo or float(codes.max()) > hi):
            raise Unsupported("module %s: %s codes span [%d, %d], outside the %d-bit range"
                               % (target, kind, codes.min(), codes.max(), bitwidth))
        entry = self.fix_table["params"].setdefault(target, {"bitwidth": bitwidth})
        entry["%s_fix_pos" % kind] = fix_pos
        name = "%s.%s%s" % (target, kind, ".T" if transpose else "")
        return self.flavour.parameter(self, name, t, codes, fix_pos, bitwidth)

    # -- the exporter's large shared pieces, handed to the units' forms (``pipeline.ops``)
    def bilinear(self, node: torch.fx.Node, call: Callable[[torch.Tensor], torch.Tensor]) -> str:
        """An exact bilinear resize of ``node.args[0]`` (``bilinear.py``: its contract and refusals)."""
        from .bilinear import bilinear
        return bilinear(self, node, call)

    def layer_norm_kernel(self, n_elems: int, gamma: Optional[torch.Tensor], beta: Optional[torch.Tensor],
                          eps: float) -> str:
        """Which of torch's CPU layer norm kernels this torch runs (``layer_norm.check_kernel``; raises
        Unsupported when none of those written)."""
        from .layer_norm import check_kernel
        return check_kernel(n_elems, gamma, beta, eps)

    def layer_norm_rows(self, name: str, rows: str, n_elems: int, gamma: Optional[str], beta: Optional[str],
                        eps: float, kernel: str) -> str:
        """Torch's CPU layer norm ``kernel`` of every row of ``rows`` ((-1, n_elems) float32), step by
        step (``layer_norm.layer_norm_rows``), with the weight and bias tensors ``gamma``, ``beta`` (or
        None); node names under ``name``."""
        from .layer_norm import OnnxOps, layer_norm_rows
        return layer_norm_rows(OnnxOps(self, name), rows, n_elems, gamma, beta, eps, kernel)
