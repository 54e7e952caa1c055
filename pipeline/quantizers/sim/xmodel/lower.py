"""The simulation's test-mode model as the real quantizer's deploy graph (before its rewrites).

Each nndct node of the capture (``pipeline.fx.capture``) becomes a ``devgraph.Node`` with:

- the name nndct's parser gives it (``names.node_names``);
- nndct's attributes, read from the module or the call (kernel/stride/dilation as ``[w, h]``, pad as
  ``[left, right, top, bottom]``, the LeakyReLU slope nndct forces, ...);
- its parameters as the quantized test-mode model holds them (already on their fix-point grid, BN
  folded, CLE and bias correction applied), in nndct's layout: conv weights OHWI, a depthwise conv's
  ``(multiplier, kh, kw, channels)``, a transposed conv's ``(out/groups, kh, kw, in)``, linear
  weights ``[out, in]`` (``pytorch_nndct/parse/parser.py`` ``_load_data``);
- its output's shape and values on the batch-1 example (NCHW, as the real quantizer records them
  on its first test-mode forward), a constant's value quantized at its fix position.

Shape arithmetic (``x.size(0)``, ``//``) is evaluated on the example and folded into the attributes
that use it, as nndct's constant folding does. An op the xmodel cannot carry raises
:class:`XmodelUnsupported` naming the node.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.fx
from torch import nn

from ....errors import ExportError
from .... import ops as t
from ....fx.graph import SimGraph, SimNode
from ....fx.refusals import XMODEL, explain
from .... import fixpoint
from ....ops.conv import CONVOLUTION_MODE
from ....ops.leaky_relu import LEAKY_SLOPE
from .devgraph import Graph, Node, Tensor
from .layout import INT_MAX

# what the xmodel writer turns into ops; anything else is refused with the node's name
SUPPORTED = {t.INPUT, t.CONST, t.CONV2D, t.DEPTHWISE_CONV2D, t.CONVTRANSPOSE2D, t.DEPTHWISE_CONVTRANSPOSE2D,
             t.DENSE, t.BATCH_NORM, t.RELU, t.RELU6, t.LEAKY_RELU, t.MAX_POOL, t.AVG_POOL, t.ADAPTIVEAVGPOOL2D,
             t.FLATTEN, t.RESHAPE, t.CONTIGUOUS, t.PERMUTE, t.TRANSPOSE, t.STRIDED_SLICE, t.RESIZE, t.HSWISH,
             t.HSIGMOID, t.ADD, t.SUB, t.RSUB, t.MULTIPLY, t.DIV, t.CONCAT, t.PAD, t.SIGMOID, t.TANH, t.GELU, t.SOFTMAX,
             t.CLAMP, t.PRELU}


class XmodelUnsupported(ExportError):
    """A node the xmodel format (or this writer) cannot carry; the message names it."""


_OPERAND_TYPES = t.BINARY_TYPES + (t.CONCAT,)


def unsupported(node: SimNode, why: str) -> XmodelUnsupported:
    """The error for a node the xmodel cannot carry, naming it (nndct name, type, the model's call) and why."""
    target = node.fx_node.target if node.fx_node is not None else None
    what = target if isinstance(target, str) else getattr(target, "__name__", target)
    return XmodelUnsupported("xmodel: node %s (%s, %s) cannot be written: %s" % (node.name, node.op, what, why))


class _Lowering:
    def __init__(self, graph: SimGraph, lowered: Optional[torch.fx.GraphModule], names: Dict[str, str],
                 values: Dict[torch.fx.Node, Any]) -> None:
        self.graph = graph
        self.lowered = lowered
        self.names = names
        self.values = values
        self.dev = Graph(graph.class_name)
        self.by_sim = {}  # type: Dict[str, Node]
        prefix = graph.class_name + "::"
        info = lowered.quant_info["output"] if lowered is not None else {}
        self.out_fp = {k[len(prefix):]: v[0] for k, v in info.items() if k.startswith(prefix)}

    # ---------------------------------------------------------------- argument access
    def value(self, arg: Any) -> Any:
        """An argument with every fx node replaced by its value on the example (shape arithmetic)."""
        if isinstance(arg, torch.fx.Node):
            v = self.values[arg]
            return v
        if isinstance(arg, (list, tuple)):
            return type(arg)(self.value(a) for a in arg) if not isinstance(arg, torch.Size) else list(arg)
        return arg

    def call_args(self, node: SimNode) -> Dict[str, Any]:
        """The call's arguments by parameter name, defaults filled (functional and method forms)."""
        params, defaults = t.SIGNATURES[node.op]
        fx_node = node.fx_node
        bound = dict(defaults)
        bound.update(zip(params, fx_node.args))
        bound.update(fx_node.kwargs)
        return {k: self.value(v) for k, v in bound.items()}

    def module(self, node: SimNode) -> Optional[nn.Module]:
        return self.graph.module(node) if node.fx_node.op == "call_module" else None

    # ---------------------------------------------------------------- nodes
    def build(self) -> Graph:
        for node in self.graph.nodes:
            if node.op in (t.SHAPE, t.FLOOR_DIVIDE) or node.shape_value:
                continue
            if node.op not in SUPPORTED and not node.op.startswith("aten::"):
                raise unsupported(node, explain(node.fx_node, self.graph.root, XMODEL,
                                                "the xmodel writer has no XIR form for %s" % node.op))
            dev = Node(self.names[node.name], node.op, self.attrs(node))
            self.dev.append(dev)
            self.by_sim[node.name] = dev
            for producer in self.data_inputs(node):
                dev.add_in_tensor(self.by_sim[producer.name].out)
            self.add_params(node, dev)
            dev.add_out_tensor(Tensor(dev.name, data=self.output(node)))
            dev.out.from_ndarray(dev.out.data)
        for node in self.graph.outputs:
            self.dev.return_node.add_in_tensor(self.by_sim[node.name].out)
        return self.dev

    def data_inputs(self, node: SimNode) -> List[SimNode]:
        inputs = [i for i in node.inputs if not (i.op == t.SHAPE or i.shape_value)]
        if node.op == t.DIV and 0 in node.const_args:
            raise unsupported(node, "a number divided by a tensor (torch traces reciprocal and mul)")
        if node.op in _OPERAND_TYPES:
            self.check_operands(node)
        return inputs

    def check_operands(self, node: SimNode) -> None:
        """The operands of arithmetic and cat: each tensor once, none a parameter or buffer (the
        capture keeps one input per distinct producer)."""
        args = node.fx_node.args
        tensors = list(args[0]) if node.op == t.CONCAT and args and isinstance(args[0], (list, tuple)) else list(args)
        tensors = [a for a in tensors if isinstance(a, torch.fx.Node)]
        if any(a.op == "get_attr" for a in tensors):
            raise unsupported(node, "a parameter or buffer of the model is an operand (the writer has no const for "
                                    "it yet); fold it into a conv/linear, or use a Python number")
        if len(set(tensors)) != len(tensors):
            raise unsupported(node, "the same tensor is an operand twice (y + y, y * y, torch.cat([y, y])), which the "
                                    "writer does not carry yet; for y + y write 2 * y")

    def output(self, node: SimNode) -> np.ndarray:
        if node.op == t.CONST:
            value = torch.tensor(float(node.value), dtype=torch.float32)
            if node.name in self.out_fp:
                value = fixpoint.fake_quant(value, int(self.out_fp[node.name][1]), int(self.out_fp[node.name][0]),
                                            "half_up")
            return value.reshape(()).numpy()
        v = self.values[node.fx_node]
        if not isinstance(v, torch.Tensor):
            raise unsupported(node, explain(node.fx_node, self.graph.root, XMODEL,
                                            "its output is not one tensor (%s)" % type(v).__name__, several=True))
        return v.detach().float().numpy()

    def add_params(self, node: SimNode, dev: Node) -> None:
        if node.op == CONVOLUTION_MODE:  # a float operator: the module's weight and bias as float consts, OIHW
            m = self.module(node)
            for kind in ("weight", "bias"):
                p = getattr(m, kind)
                if p is not None:
                    dev.params[kind] = Tensor("%s::%s.%s" % (self.graph.class_name, node.module_path, kind))
                    dev.params[kind].from_ndarray(np.ascontiguousarray(p.detach().float().numpy()))
            return
        if node.op == t.PRELU:  # nndct binds the slopes as the node's parameter "weight" (op_dispatcher.prelu)
            slopes = self.slopes(node)
            dev.params["weight"] = Tensor(node.param_names["weights"])
            dev.params["weight"].from_ndarray(slopes)
            return
        if node.op not in t.PARAM_TYPES:
            return
        m = self.lowered.get_submodule(node.name) if self.lowered is not None else self.graph.module(node)
        weight = m.weight.detach().float().numpy()
        if node.op in (t.CONV2D, t.CONVTRANSPOSE2D):
            if node.op == t.CONVTRANSPOSE2D:
                weight = weight.swapaxes(0, 1)
            weight = weight.transpose(0, 2, 3, 1)
        elif node.op == t.DEPTHWISE_CONV2D:
            c = m.in_channels
            weight = weight.reshape((m.out_channels // c, c) + tuple(weight.shape[2:])).transpose(0, 2, 3, 1)
        elif node.op == t.DEPTHWISE_CONVTRANSPOSE2D:
            c = m.in_channels
            weight = weight.reshape((c, m.out_channels // c) + tuple(weight.shape[2:])).swapaxes(0, 1)
            weight = weight.transpose(0, 2, 3, 1)
        dev.params["weights"] = Tensor(node.param_names["weights"], data=np.ascontiguousarray(weight, np.float32))
        dev.params["weights"].from_ndarray(dev.params["weights"].data)
        if "bias" in node.param_names:
            bias = np.ascontiguousarray(m.bias.detach().float().numpy())
            dev.params["bias"] = Tensor(node.param_names["bias"])
            dev.params["bias"].from_ndarray(bias)

    def slopes(self, node: SimNode) -> np.ndarray:
        """A PReLU's slopes, shape ``(num_parameters,)`` float32: the lowered model's (quantized), or the float
        ones without it."""
        if self.lowered is not None:
            weight = self.lowered.get_submodule(node.name).weight
        else:
            weight = self.graph.parameter(node.param_names["weights"])
        return np.ascontiguousarray(weight.detach().float().numpy().reshape(-1), np.float32)

    # ---------------------------------------------------------------- attributes per type
    def attrs(self, node: SimNode) -> Dict[str, Any]:
        op = node.op
        if op in t.CONV_TYPES:
            m = self.module(node)
            if node.op == t.CONVTRANSPOSE2D and m.groups != 1:
                raise unsupported(node, "groups=%d: a grouped transposed conv is not written yet (depthwise, groups = "
                                        "in_channels = out_channels, is)" % m.groups)
            if any(_pair(getattr(m, "output_padding", 0))):
                # nndct writes transposed-conv2d without it: the op's output would lack the last row/column
                raise unsupported(node, "output_padding=%s: the xmodel's transposed conv has no output padding (the "
                                        "real quantizer drops it and the compiled output is one row/column short); "
                                        "use kernel_size = 2 * stride with padding = stride // 2 (e.g. 4, 2, 1) for "
                                        "an exact doubling" % (tuple(_pair(m.output_padding)),))
            (kh, kw), (sh, sw), (dh, dw), (ph, pw) = (_pair(m.kernel_size), _pair(m.stride), _pair(m.dilation),
                                                      _pair(m.padding))
            return {"kernel": [kw, kh], "stride": [sw, sh], "dilation": [dw, dh], "pad_mode": 0,
                    "pad": [pw, pw, ph, ph], "group": m.groups, "bias_term": m.bias is not None,
                    "in_dim": m.in_channels, "out_dim": m.out_channels}
        if op == t.LEAKY_RELU:
            return {"alpha": LEAKY_SLOPE}
        if op == t.PRELU:  # op_dispatcher.prelu: num_parameters = weight.shape[0]
            return {"num_parameters": int(self.graph.parameter(node.param_names["weights"]).shape[0])}
        if op == t.GELU:
            m = self.module(node)
            approximate = m.approximate if m is not None else self.call_args(node)["approximate"]
            return {"approximate": "'%s'" % approximate}
        if op == t.SOFTMAX:
            m = self.module(node)
            return {"axis": m.dim if m is not None else self.call_args(node)["dim"]}
        if op == t.CONCAT:
            return {"axis": self.call_args(node)["dim"]}
        if op in (t.MAX_POOL, t.AVG_POOL):
            return self.pool_attrs(node)
        if op == t.FLATTEN:
            m = self.module(node)
            a = {"start_dim": m.start_dim, "end_dim": m.end_dim} if m is not None else self.call_args(node)
            return {"start_dim": a["start_dim"], "end_dim": a["end_dim"]}
        if op == t.RESHAPE:
            return {"shape": self.shape_args(node)}
        if op == t.PERMUTE:
            return {"order": self.shape_args(node)}
        if op == t.TRANSPOSE:
            a = self.call_args(node)
            return {"dims": [a["dim0"], a["dim1"]]}
        if op == t.STRIDED_SLICE:
            return self.slice_attrs(node)
        if op == t.RESIZE:
            return self.resize_attrs(node)
        if op == t.PAD:
            return self.pad_attrs(node)
        return {}

    def shape_args(self, node: SimNode) -> List[int]:
        args = [self.value(a) for a in node.fx_node.args[1:]]
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = list(args[0])
        if "shape" in node.fx_node.kwargs or "dims" in node.fx_node.kwargs:
            args = list(self.value(node.fx_node.kwargs.get("shape", node.fx_node.kwargs.get("dims"))))
        return [int(a) for a in args]

    def pool_attrs(self, node: SimNode) -> Dict[str, Any]:
        m = self.module(node)
        if m is not None:
            a = {k: getattr(m, k, None) for k in ("kernel_size", "stride", "padding", "dilation", "ceil_mode",
                                                  "count_include_pad", "divisor_override")}
        else:
            a = self.call_args(node)
        if a.get("divisor_override") is not None:
            raise unsupported(node, "divisor_override is not carried by the xmodel")
        if any(d != 1 for d in _pair(a.get("dilation") or 1)):
            raise unsupported(node, "dilation=%s: the xmodel's pool has no dilation (nndct writes the pool without it); "
                                    "use dilation 1" % (tuple(_pair(a["dilation"])),))
        (kh, kw) = _pair(a["kernel_size"])
        (sh, sw) = _pair(a["stride"]) if a["stride"] not in (None, []) else (kh, kw)
        (ph, pw) = _pair(a["padding"])
        attrs = {"kernel": [kw, kh], "stride": [sw, sh], "pad": [pw, pw, ph, ph], "pad_mode": int(bool(a["ceil_mode"])),
                 "global": False}
        if node.op == t.AVG_POOL:
            attrs["count_include_pad"] = bool(a["count_include_pad"])
        return attrs

    def slice_attrs(self, node: SimNode) -> Dict[str, Any]:
        fx_node = node.fx_node
        source = fx_node.args[0]
        shape = list(self.values[node.inputs[0].fx_node].shape)
        # a slice of a graph input has no base
        base = source.args[0] if isinstance(source, torch.fx.Node) and source.args else None
        if base is not None and isinstance(source, torch.fx.Node) and source in self.graph.fx_graph.nodes \
                and source.op in ("call_function", "call_method") and _is_split(source):
            return self.piece_attrs(node, source, shape)
        index = fx_node.args[1]
        index = index if isinstance(index, tuple) else (index,)
        dims, begin, end, strides = [], [], [], []
        for dim, item in enumerate(index):
            if not isinstance(item, slice):
                raise unsupported(node, "indexing with %r (only slices are written)" % (item,))
            start, stop, step = (self.value(item.start), self.value(item.stop), self.value(item.step))
            dims.append(dim)
            begin.append(0 if start is None else int(start))
            end.append(INT_MAX if stop is None else min(int(stop), INT_MAX))
            strides.append(1 if step is None else int(step))
        return {"dims": dims, "begin": begin, "end": end, "strides": strides}

    def piece_attrs(self, node: SimNode, split: torch.fx.Node, shape: List[int]) -> Dict[str, Any]:
        """One piece of chunk/split as nndct's replacement slices it: every dimension sliced, the
        split dimension from the piece's start to its end (the last piece to the dimension's size)."""
        target = split.target if isinstance(split.target, str) else split.target.__name__
        second = self.value(split.args[1] if len(split.args) > 1 else
                            split.kwargs.get("chunks", split.kwargs.get("split_size_or_sections",
                                                                       split.kwargs.get("split_size"))))
        dim = self.value(split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0))
        dim = dim + len(shape) if dim < 0 else dim
        size = shape[dim]
        if target == "chunk":
            step = -(-size // second)
            count = -(-size // step) if step else second
            bounds = [(k * step, size if k == count - 1 else (k + 1) * step) for k in range(count)]
        elif isinstance(second, (list, tuple)):
            bounds, start = [], 0
            for s in second:
                bounds.append((start, start + s))
                start += s
        else:
            count = max(1, -(-size // second))
            bounds = [(k * second, size if k == count - 1 else (k + 1) * second) for k in range(count)]
        start, stop = bounds[node.fx_node.args[1]]
        rank = len(shape)
        return {"dims": list(range(rank)), "begin": [start if d == dim else 0 for d in range(rank)],
                "end": [stop if d == dim else INT_MAX for d in range(rank)], "strides": [1] * rank}

    def resize_attrs(self, node: SimNode) -> Dict[str, Any]:
        m = self.module(node)
        a = {"size": m.size, "scale_factor": m.scale_factor, "mode": m.mode, "align_corners": m.align_corners} \
            if m is not None else self.call_args(node)
        if a["mode"] not in ("nearest", "bilinear"):
            raise unsupported(node, "resize mode %r (the xmodel writer writes nearest and bilinear)" % a["mode"])
        scale = a["scale_factor"]
        if a["size"] is not None:
            size = list(_pair(a["size"]))
            scale_wh = [1.0, 1.0]
        else:
            size = [0, 0]
            scale_wh = [float(scale)] * 2 if not isinstance(scale, (list, tuple)) else [float(s) for s in scale[::-1]]
        corners = bool(a["align_corners"] or False)
        # the real quantizer's xmodel: nearest without half-pixel centers; bilinear with them
        # unless align_corners (torch's half-pixel source index, align_corners=False)
        bilinear = a["mode"] == "bilinear"
        return {"mode": "BILINEAR" if bilinear else "NEAREST", "align_corners": corners,
                "half_pixel_centers": bilinear and not corners, "size": size, "scale": scale_wh}

    def pad_attrs(self, node: SimNode) -> Dict[str, Any]:
        m = self.module(node)
        if m is not None:
            pad, mode, value = list(m.padding), "constant", float(m.value)
        else:
            a = self.call_args(node)
            pad, mode, value = list(a["pad"]), a["mode"], a["value"]
        if mode != "constant":
            raise unsupported(node, "pad mode %r (the xmodel writer folds constant pads)" % mode)
        if any(int(p) < 0 for p in pad):
            raise unsupported(node, "negative padding %s (a crop): the DPU pads, it does not crop; slice the tensor "
                                    "instead (x[:, :, a:b, c:d])" % (list(pad),))
        return {"pad_with": [int(p) for p in pad], "mode": "CONSTANT", "constant_values": float(value or 0.0)}


def _pair(v: Any) -> Tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _is_split(node: torch.fx.Node) -> bool:
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return target in ("chunk", "split")


def record_values(graph: SimGraph, examples: Sequence[torch.Tensor]) -> Dict[torch.fx.Node, Any]:
    """Every fx node's value when the float graph runs on ``examples`` (batch 1)."""
    values = {}  # type: Dict[torch.fx.Node, Any]

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            values[n] = result
            return result

    with torch.no_grad():
        Recorder(graph.gm).run(*examples)
    return values


def deploy_graph(graph: SimGraph, lowered: Optional[torch.fx.GraphModule], names: Dict[str, str],
                 examples: Sequence[torch.Tensor]) -> Graph:
    """The deploy graph (before ``deploy.optimize``) of a lowered test-mode model.

    Args:
        graph: the capture the lowered model was built from (``lowered.sim_session.graph``).
        lowered: the lowered test-mode model (``pipeline.quantizers.sim.lowered``): quantized
            parameters and ``quant_info``; None for the float parameters (the graph's structure
            alone, as ``names.xmodel_op_names`` needs it).
        names: nndct full names (``names.node_names``).
        examples: one batch-1 float32 tensor per model input.

    Raises:
        XmodelUnsupported: a node the xmodel cannot carry.
    """
    return _Lowering(graph, lowered, names, record_values(graph, examples)).build()
