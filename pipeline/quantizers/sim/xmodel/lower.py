"""The simulation's test-mode model as the real quantizer's deploy graph (before its rewrites).

Each nndct node of the capture (``pipeline.fx.capture``) becomes a ``devgraph.Node`` with:

- the name nndct's parser gives it (``names.node_names``);
- nndct's attributes, read from the module or the call by the op's record (``OpRecord.xmodel``: the
  lowering of each type, in its unit under ``pipeline/ops/``; kernel/stride/dilation as ``[w, h]``, pad
  as ``[left, right, top, bottom]``, the LeakyReLU slope nndct forces, ...);
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
from ....fx.graph import SimGraph, SimNode, first_output
from ....fx.refusals import XMODEL, explain
from .... import fixpoint
from ....ops.conv import CONVOLUTION_MODE
from .devgraph import Graph, Node, Tensor


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
        self.params = {}  # type: Dict[str, Tensor]  # parameter operands by full name (one tensor each)
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
        bound = t.call_arguments(node.op, node.fx_node.args, node.fx_node.kwargs)
        return {k: self.value(v) for k, v in bound.items()}

    def module(self, node: SimNode) -> Optional[nn.Module]:
        return self.graph.module(node) if node.fx_node.op == "call_module" else None

    # ---------------------------------------------------------------- nodes
    def refuse_lost_assignments(self) -> None:
        """An in-place op (``aten::<name>_``: ``x[idx] = v``'s ``aten::fill_``/``aten::copy_``) whose output no op
        reads: nndct writes it as a custom op nothing reads, and the tensor assigned into as it was before
        (a ``new_zeros`` const of zeros; checked against the real quantizer's files, Swin's shifted-window
        mask in tests/data/corpus_real/tv_swin; a ``y[:, 0:2].zero_()`` read after it through ``y``,
        tests/data/refused_real/slice_zero_read), so the file would compute the model without it: refused."""
        for node in self.graph.nodes:
            if node.op.startswith("aten::") and node.op.endswith("_") and not node.users \
                    and not node.is_output and node.in_quant_part and node.fx_node is not None \
                    and node.fx_node.op == "call_method":
                raise unsupported(node, "it writes a tensor in place (%s): the real quantizer writes %s "
                                        "as a custom op whose output no op reads, and the readers of the tensor "
                                        "written read it as it was before, so the file would compute the model "
                                        "without the write; write the result to a new tensor and read that (torch.cat, torch.where)"
                                        % ("x." + str(node.fx_node.target) + "(...)", node.op))
            if node.op.startswith("aten::") and node.op.endswith("_") and not node.users \
                    and not node.is_output and node.in_quant_part:
                raise unsupported(node, "it assigns into a tensor in place (x[idx] = v): the real quantizer writes "
                                        "%s as a custom op whose output no op reads, and the tensor's readers read "
                                        "it as it was before (a new_zeros tensor: a const of zeros), so the file "
                                        "would compute the model without the assignment (Swin's shifted-window "
                                        "mask); build the tensor without assigning into it (torch.cat, torch.where)"
                                        % node.op)

    def build(self) -> Graph:
        self.refuse_lost_assignments()
        for node in self.graph.nodes:
            if (node.op in (t.SHAPE, t.FLOOR_DIVIDE) or node.shape_value) and not size_kept(node):
                continue
            if not node.in_quant_part:
                continue  # a node outside the quantized parts (QuantStub/DeQuantStub) is in no file
            if t.xmodel_form(node.op) is None and not (node.op.startswith("aten::") and node.op not in t.XMODEL):
                raise unsupported(node, explain(node.fx_node, self.graph.root, XMODEL,
                                                "the xmodel writer has no XIR form for %s" % node.op))
            if node.name not in self.names:  # a kept size read no traced aten::size of its consumer gives
                raise unsupported(node, "a size taken as a tensor whose traced aten::size is not found")
            dev = Node(self.names[node.name], node.op, self.attrs(node))
            self.dev.append(dev)
            self.by_sim[node.name] = dev
            # a producer outside the quantized parts is no input: a QuantStub's data op has none
            tensors = [self.by_sim[producer.name].out for producer in self.data_inputs(node)
                       if producer.name in self.by_sim]
            for index, param in self.param_operands(node):
                tensors.insert(index, param)
                dev.params[param.name] = param
            for tensor in tensors:
                dev.add_in_tensor(tensor)
            self.add_params(node, dev)
            dev.add_out_tensor(Tensor(dev.name, data=self.output(node)))
            dev.out.from_ndarray(dev.out.data)
            value = self.values.get(node.fx_node) if node.fx_node is not None else None
            if isinstance(value, torch.Tensor) and value.dtype == torch.bool:
                dev.out.dtype = "bool"  # a comparison's mask (custom_xop writes the tensor's dtype)
        for node in self.graph.outputs:
            if node.name in self.by_sim:
                self.dev.return_node.add_in_tensor(self.by_sim[node.name].out)
        return self.dev

    def data_inputs(self, node: SimNode) -> List[SimNode]:
        sizes = takes_sizes(node.op)
        inputs = [i for i in node.inputs if sizes and size_kept(i) or not (i.op == t.SHAPE or i.shape_value)]
        if node.op == t.DIV and 0 in node.const_args:
            raise unsupported(node, "a number divided by a tensor (torch traces reciprocal and mul)")
        if node.op in _OPERAND_TYPES:
            self.check_operands(node)
        return inputs

    def check_operands(self, node: SimNode) -> None:
        """The operands of arithmetic and cat: none a parameter or buffer (a tensor given twice is two
        inputs of the capture's node, as in nndct's graph)."""
        args = node.fx_node.args
        tensors = list(args[0]) if node.op == t.CONCAT and args and isinstance(args[0], (list, tuple)) else list(args)
        tensors = [a for a in tensors if isinstance(a, torch.fx.Node)]
        form = t.xmodel_form(node.op)
        bound = form is not None and form.param_operands
        if any(a.op == "get_attr" and not (bound and self.full_name(a) in node.free_params) for a in tensors):
            raise unsupported(node, "a parameter or buffer of the model is an operand (the writer has no const for "
                                    "it yet); fold it into a conv/linear, or use a Python number")

    def full_name(self, fx_node: torch.fx.Node) -> str:
        """The full name (``<Class>::<path>``) of a ``get_attr`` node's tensor."""
        return "%s::%s" % (self.graph.class_name, fx_node.target)

    def param_operands(self, node: SimNode) -> List[Tuple[int, Tensor]]:
        """The parameters or buffers of the model that are operands of ``node`` (its ``free_params`` for a
        quantizable type, every ``get_attr`` operand for any other: the class token of ``expand``, the table and
        index buffer of ``table[idx]``; where its record's form takes them: ``XmodelForm.param_operands``), each
        with its index among the node's inputs (its argument position) and the one Tensor of its full name:
        float32 as the model holds it (no fix position, so the lowered model holds it unchanged; an index buffer
        int64), shape as torch's (``(C,)``, ``(C, 1, 1)``)."""
        form = t.xmodel_form(node.op)
        if form is None or not form.param_operands:
            return []
        quantizable = t.spec(node.op).quantizable  # its operands are its free_params; any other takes every one
        found = []  # type: List[Tuple[int, Tensor]]
        for index, a in enumerate(node.fx_node.args):
            if isinstance(a, torch.fx.Node) and a.op == "get_attr" and (
                    self.full_name(a) in node.free_params or not quantizable):
                name = self.full_name(a)
                if name not in self.params:
                    p = self.graph.parameter(name).detach()  # an index buffer keeps its int64 (nndct's const)
                    self.params[name] = Tensor(name)
                    self.params[name].from_ndarray(np.ascontiguousarray((p if p.dtype == torch.int64 else
                                                                         p.float()).numpy()))
                found.append((index, self.params[name]))
        return found

    def output(self, node: SimNode) -> np.ndarray:
        if node.size_axis is not None and size_kept(node):  # a size read kept as a tensor
            source = self.values[node.inputs[0].fx_node]
            return np.array([source.shape[node.size_axis]], np.float32)
        if node.op == t.CONST:
            value = torch.tensor(float(node.value), dtype=torch.float32)
            if node.name in self.out_fp:
                value = fixpoint.fake_quant(value, int(self.out_fp[node.name][1]), int(self.out_fp[node.name][0]),
                                            "half_up")
            return value.reshape(()).numpy()
        v = first_output(node, self.values[node.fx_node])  # of several outputs, the first: the op's tensor
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
        if node.op in t.NORM_TYPES:  # its module quantizes its own weight and bias: those it has, in order
            for kind in ("weights", "bias"):
                if kind in node.param_names:
                    p = self.norm_param(node, kind)
                    dev.params[kind] = Tensor(node.param_names[kind])
                    dev.params[kind].from_ndarray(p)
            return
        if node.op not in t.PARAM_TYPES:
            return
        m = self.lowered.get_submodule(node.name) if self.lowered is not None else self.graph.module(node)
        weight = m.weight.detach().float().numpy()
        form = t.xmodel_form(node.op)
        if form is not None and form.weights is not None:  # nndct's layout (the record's)
            weight = form.weights(m, weight)
        dev.params["weights"] = Tensor(node.param_names["weights"], data=np.ascontiguousarray(weight, np.float32))
        dev.params["weights"].from_ndarray(dev.params["weights"].data)
        if "bias" in node.param_names:
            bias = np.ascontiguousarray(m.bias.detach().float().numpy())
            dev.params["bias"] = Tensor(node.param_names["bias"])
            dev.params["bias"].from_ndarray(bias)

    def norm_param(self, node: SimNode, kind: str) -> np.ndarray:
        """A layer norm's weight or bias (``kind``: ``weights``, ``bias``), float32 as the lowered model holds
        it (its module's own parameter), or the float one without it."""
        if self.lowered is not None and node.fx_node.op == "call_module":
            p = getattr(self.lowered.get_submodule(node.name), "weight" if kind == "weights" else "bias")
        else:
            p = self.graph.parameter(node.param_names[kind])
        return np.ascontiguousarray(p.detach().float().numpy(), np.float32)

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
        """nndct's attributes of a node: its record's lowering (``OpRecord.xmodel``; none for a custom op)."""
        form = t.xmodel_form(node.op)
        return form.lower(self, node) if form is not None else {}

    def shape_args(self, node: SimNode) -> List[int]:
        """The ints of a view/reshape/permute call (``x.view(a, b)``, ``x.view((a, b))``, ``shape=``/``dims=``),
        traced sizes evaluated on the example."""
        args = [self.value(a) for a in node.fx_node.args[1:]]
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = list(args[0])
        if "shape" in node.fx_node.kwargs or "dims" in node.fx_node.kwargs:
            args = list(self.value(node.fx_node.kwargs.get("shape", node.fx_node.kwargs.get("dims"))))
        return [int(a) for a in args]

    def unsupported(self, node: SimNode, why: str) -> XmodelUnsupported:
        """The error for a node the xmodel cannot carry (:func:`unsupported`), for the records' lowerings."""
        return unsupported(node, why)


def takes_sizes(op: str) -> bool:
    """The type takes traced sizes as tensors: its form says so (``XmodelForm.traced_sizes``: ``nndct_expand``),
    or it is a float operator without a record (``aten::unflatten``), written as a custom op of every input
    tensor (nndct's ``custom_xop``; observed: ViT's attention, ``tests/data/corpus_real/tv_vit``)."""
    form = t.xmodel_form(op)
    if form is not None:
        return form.traced_sizes
    return op.startswith("aten::") and op not in t.XMODEL


def size_kept(node: SimNode) -> bool:
    """A size read (``nndct_shape``) that some consumer takes as a tensor (:func:`takes_sizes`:
    ``cls.expand(x.shape[0], -1, -1)``): written as an op of its own, named after its traced ``aten::size``,
    where every other size read is folded into the attributes that use it."""
    return node.op == t.SHAPE and any(takes_sizes(u.op) for u in node.users)


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
