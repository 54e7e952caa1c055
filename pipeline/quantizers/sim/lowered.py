"""The test-mode model of the sim backend: a lowered ``torch.fx.GraphModule``.

Contract (other code, e.g. the ONNX exporter in ``pipeline/quantizers/sim/export``, walks this graph node by
node and relies on every point below):

1. Inputs: one ``placeholder`` per model input (float32, any rank, in ``forward``'s order). A call
   of the module never writes its inputs: where the graph writes one in place (the model's own
   ``x.sub_(0.5)`` or ``x[:, 0] = 0`` on its input), ``written_inputs`` (a tuple of input positions,
   ``fx.in_place.written_inputs``) lists it and a forward pre-hook (``OwnInputs``) gives the graph a
   copy. Code that runs the graph without calling the module (a ``torch.fx.Interpreter``, a new
   GraphModule on the graph) gives those inputs copies itself. Outputs: what the model returns (a tensor or a tuple).
2. The ONLY custom ``call_function`` is
   ``pipeline.fixpoint.fake_quant(x, fix_pos: int, bitwidth: int, method: str)``,
   registered with ``torch.fx.wrap``. Activations and the input use ``method == "half_up"``.
   ``fix_pos`` and ``bitwidth`` are Python ints, ``method`` a str, all positional.
   (Re-tracing the GraphModule keeps it as one node with
   ``torch.fx.Tracer(autowrap_functions=(fake_quant,))``; ``LoweredTracer``, the graph's ``_tracer_cls``,
   with which torch traces a pickled lowered model's code again on load.)
3. ``torch.nn.Conv2d``, ``torch.nn.Linear``, ``torch.nn.ConvTranspose2d`` and an unfused
   ``torch.nn.BatchNorm1d``/``BatchNorm2d`` (mean 0, var 1, eps 0: ``x * weight + bias``) appear as
   ``call_module`` nodes on standard modules whose ``weight`` and ``bias`` are ALREADY quantized:
   float32 values exactly ``q * 2**-p`` with q in the code range (std_round, BN folded, CLE and
   bias correction applied). Each such module carries int attributes ``weight_fix_pos``,
   ``bias_fix_pos`` (None when the module has no bias) and ``bitwidth``. The submodule name is
   the nndct node name (e.g. ``nndct_conv2d_1``). A layer norm (``nn.LayerNorm`` or
   ``F.layer_norm``) is a ``call_module`` on a new ``nn.LayerNorm`` named after its node, in the
   same way: weight and bias (where it has them; else None) rounded std_round at their fix
   positions, the same three attributes; it runs ``F.layer_norm`` in float32 on its quantized
   input, as nndct's LayerNorm module does. A PReLU (``nn.PReLU`` or ``F.prelu``) is a ``call_module`` on
   a new ``nn.PReLU`` named after its node in the same way: its slopes (``weight``) rounded std_round at
   their fix position, the same three attributes (``bias_fix_pos`` None); it runs ``F.prelu``. A layer
   outside the model's quantized parts (QuantStub/DeQuantStub: ``SimNode.in_quant_part``), or any layer
   under quant_off (``SimGraph.quant_off``, nndct's ``--nndct_quant_off``), is a copy of
   the float module under its node's name, its weight and bias float, ``weight_fix_pos`` and
   ``bias_fix_pos`` None and ``float_part`` the reason (a sentence); every other node there is torch's own
   call, unquantized.
4. Everything else is standard: ``call_module`` on ``nn.ReLU``, ``nn.ReLU6``, ``nn.LeakyReLU``
   (slope 0.1015625), ``nn.Hardtanh``, ``nn.MaxPool2d``, ``nn.AvgPool2d``,
   ``nn.AdaptiveAvgPool2d``, ``nn.Upsample``, ``nn.Flatten``; ``call_function`` on
   ``torch.add``/``operator.add``, ``torch.mul``/``operator.mul`` (in-place ``+=`` becomes ``add``),
   ``torch.cat``, ``torch.flatten``, ``torch.clamp``, ``torch.reshape``, ``torch.permute``,
   ``torch.relu``, ``F.relu``, ``F.relu6``, ``F.leaky_relu``, ``F.max_pool2d``,
   ``F.avg_pool2d``, ``F.adaptive_avg_pool2d``, ``F.interpolate``; ``call_method``
   ``reshape``/``view``/``flatten``/``permute``/``contiguous``/``size``/``relu``/``add``/``mul``;
   and the model's own calls for float operators (``nn.Sigmoid``, ``nn.Tanh``, ``nn.GELU``,
   ``nn.SiLU``, ``nn.Softmax``, ``torch.mean``/``Tensor.mean``, ``F.pad``, ``torch.clamp``,
   ``operator.sub``/``truediv``, any other torch call), shape arithmetic (``getattr(x, "shape")``,
   ``operator.getitem``, ``operator.floordiv``, ``size``) and ``chunk``/``split`` with the
   ``getitem`` of each piece. Constants are Python numbers; a float constant with its own fix
   position holds its quantized value.
5. Hardswish is lowered per docs/arithmetic.md#hardsigmoid-and-hardswish to ``a = torch.add(x, 3.0)``,
   ``b = torch.clamp(a, 0.0, 6.0)``, ``c = torch.mul(b, 2731/16384)``, ``d = fake_quant(c, 7, 8, "half_up")``,
   ``torch.mul(x, d)``; Hardsigmoid to the first three. The average-pool correction factor is a
   ``torch.mul`` by the constant (left out when it is 1.0); for an adaptive pool the factor, and whether
   it is scaled and quantized at all, come from the example input's shape. nndct decides that on every
   forward: the model (``lowered_forward.LoweredModule``) runs inputs whose adaptive pools see other sizes
   through a graph lowered for those sizes, on its own modules; its graph stays the example's.
6. A node's output is followed by ``fake_quant`` exactly when ``quant_info.json`` has an
   ``output`` entry for it; of a node with several outputs (``SimNode.outputs``: ``x.max(dim)``), the
   first output where the model takes it (``y[0]``, ``.values``: ``SimGraph.picks``).
7. ``node.meta["nndct_node"]`` names the nndct node (e.g. ``"nndct_relu_2"``) on the fx node
   whose value is that node's output as the real quantizer's module returns it (after its
   fake_quant when it is quantized).
8. Attributes: ``quant_info`` (the dict ``quant_info.json`` holds), ``fast_finetuned`` (the
   parameters came from ``param.pth``), ``output_fix_pos`` (the
   fix_pos of the model output when it is quantized, else None; for several outputs, the first),
   ``class_name`` of the GraphModule is the float model's class name.
"""
import copy
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx
from torch import nn
from torch.fx.node import map_arg

from ...errors import QuantizationError
from ... import fixpoint
from ... import ops as g
from ...fx.graph import SimGraph, SimNode
from ...fx.in_place import written_inputs
from .ops import getattr_path, OUT_OF_PLACE, OUT_OF_PLACE_METHODS, norm_float_params, norm_shape_eps
from .lowered_forward import LoweredModule, PoolVariants
from .plan import QuantPlan


def _quantized_module(graph: SimGraph, node: SimNode, info: Dict[str, Any], bitwidth: int,
                      bias_corr: Optional[Dict[str, Any]], params: Optional[Dict[str, Any]] = None) -> nn.Module:
    m = copy.deepcopy(graph.module(node))
    if params is not None:  # fast-finetuned weights (param.pth) replace the float ones
        w, b = params[node.name]
        m.weight = nn.Parameter(w.detach().clone(), requires_grad=False)
        if b is not None:
            m.bias = nn.Parameter(b.detach().clone(), requires_grad=False)
    wname = node.param_names["weights"]
    wfp = int(info["param"][wname][0][1])
    m.weight = nn.Parameter(fixpoint.fake_quant(m.weight.detach(), wfp, bitwidth, "std_round"),
                            requires_grad=False)
    bfp = None
    if m.bias is not None:
        bias = m.bias.detach()
        if bias_corr is not None and node.op in g.BIAS_CORR_TYPES:
            corr = bias_corr.get(graph.full_name(node))
            if corr is None or corr.numel() != bias.numel():
                raise QuantizationError(
                    "bias_corr.pth has no %d-element correction for %s: it was made for another "
                    "model; re-run calibration" % (bias.numel(), graph.full_name(node)))
            bias = torch.sub(bias, corr.to(bias.dtype))
        bfp = int(info["param"][node.param_names["bias"]][0][1])
        m.bias = nn.Parameter(fixpoint.fake_quant(bias, bfp, bitwidth, "std_round"), requires_grad=False)
    m.weight_fix_pos = wfp
    m.bias_fix_pos = bfp
    m.bitwidth = bitwidth
    return m


def _quantized_norm(graph: SimGraph, node: SimNode, info: Dict[str, Any], bitwidth: int) -> nn.Module:
    """A node whose module quantizes its own parameters (role ``norm``) as a new module named after it: a
    layer norm an ``nn.LayerNorm`` (its normalized_shape and eps; module or ``F.layer_norm`` alike), a
    PReLU an ``nn.PReLU`` (``num_parameters`` the slopes' count; module or ``F.prelu`` alike), whose weight
    and bias are the float ones rounded std_round at their quant_info fix positions, with
    ``weight_fix_pos``, ``bias_fix_pos`` (None where it has no such parameter) and ``bitwidth``: what
    nndct's LayerNorm and PReLU modules run in test mode. Any other ``norm`` type: the module its record's
    ``norm`` form makes (``OpRecord.norm``)."""
    form = g.norm_form(node.op)
    if form is not None:
        m = form.module(graph, node)  # type: nn.Module
    elif node.op == g.PRELU:
        m = nn.PReLU(int(norm_float_params(graph, node)[0].numel()))
    else:
        shape, eps = norm_shape_eps(graph, node)
        m = nn.LayerNorm(shape, eps=eps)
    fix = {}  # type: Dict[str, Optional[int]]
    for kind, attr, t in zip(("weights", "bias"), ("weight", "bias"), norm_float_params(graph, node)):
        fix[kind] = None
        if t is None:
            m.register_parameter(attr, None)
            continue
        fix[kind] = int(info["param"][node.param_names[kind]][0][1])
        m.register_parameter(attr, nn.Parameter(fixpoint.fake_quant(t, fix[kind], bitwidth, "std_round"),
                                                requires_grad=False))
    m.weight_fix_pos, m.bias_fix_pos, m.bitwidth = fix["weights"], fix["bias"], bitwidth
    return m


def check_quant_info(graph: SimGraph, plan: QuantPlan, info: Dict[str, Any]) -> None:
    """Raise QuantizationError unless ``info`` has every entry this graph needs.

    This is nndct's test-mode check (``illegal_quant_info``): every param and output name the
    graph expects must be present; extra entries are allowed. The message lists what is missing.
    """
    prefix = graph.class_name + "::"
    missing = [p for p in plan.param_order if p not in info["param"]] + \
        [prefix + n for n in plan.output_order if prefix + n not in info["output"]]
    if missing:
        raise QuantizationError(
            "quant_info.json does not match this model (missing %s); it was calibrated for "
            "another model or quantizer version: re-run calibration" % ", ".join(missing))
    if info.get("input"):
        raise QuantizationError("quant_info.json has 'input' entries (mixed-precision strategy), "
                                "which the sim quantizer does not simulate")


class LoweredTracer(torch.fx.Tracer):
    """torch.fx's tracer keeping ``fake_quant`` and the forms' ``sim_support.OPAQUE_CALLS`` one call each: the
    tracer of every lowered graph (its ``_tracer_cls``), so that a pickled lowered model (``torch.save``; torch
    pickles a GraphModule as its code and traces that again on load) loads. Arguments: ``torch.fx.Tracer``'s."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("autowrap_functions", (fixpoint.fake_quant,) + tuple(g.OPAQUE_CALLS))
        super().__init__(*args, **kwargs)


def build_lowered(graph: SimGraph, plan: QuantPlan, info: Dict[str, Any], bitwidth: int,
                  bias_corr: Optional[Dict[str, Any]], params: Optional[Dict[str, Any]] = None,
                  pool_shapes: Optional[Dict[torch.fx.Node, Any]] = None,
                  trainable: Optional[str] = None) -> torch.fx.GraphModule:
    """Build the lowered test-mode GraphModule (see the module docstring for the contract).

    Args:
        graph: the SimGraph (float, BN folded, CLE applied when on); not modified.
        plan: its QuantPlan.
        info: the quant_info dict (from the sim or from the real quantizer).
        bitwidth: bit width of every tensor.
        bias_corr: ``"<Class>::<node>"`` -> 1-D float32 correction, or None when bias correction
            is off.
        params: node name -> (weight, bias) of every parameter node, replacing the float model's
            (fast finetune's ``param.pth``, ``sim/adaquant.py``), or None. As nndct's
            ``load_ft_param``: the bias correction is subtracted from them, then they are rounded.
        pool_shapes: fx node -> NCHW shape replacing the example's as an adaptive pool's input shape (the
            factor, and whether it divides), or None: the example's, and the model a
            ``lowered_forward.LoweredModule`` that lowers again for inputs whose pools see other sizes.
        trainable: None (the test-mode model), or the QAT trainable model's rule (``"real"``, ``"deploy"``:
            ``ops/sim_support.py``'s ``train``), whose forms decide per forward themselves (no LoweredModule).

    Raises:
        QuantizationError: ``info`` or ``bias_corr`` do not match the graph.
    """
    check_quant_info(graph, plan, info)
    prefix = graph.class_name + "::"
    out_fp = {k[len(prefix):]: int(v[0][1]) for k, v in info["output"].items()
              if k.startswith(prefix) and v[0][1] is not None}
    root = nn.Module()
    new = torch.fx.Graph()
    env = {}  # type: Dict[torch.fx.Node, torch.fx.Node]

    def lookup(n: torch.fx.Node) -> torch.fx.Node:
        return env[n]

    def add_module(name: str, m: nn.Module) -> str:
        root.add_module(name, m)
        return name

    norm_attrs = []  # type: List[torch.fx.Node]
    consts = {}  # type: Dict[SimNode, Any]
    for node in graph.nodes:
        if node.op == g.CONST:  # as the quantized graph uses it: quantized when it has an entry
            consts[node] = node.value
            if node.name in out_fp and not node.shape_value:
                consts[node] = float(fixpoint.fake_quant(torch.tensor(float(node.value), dtype=torch.float32),
                                                         out_fp[node.name], bitwidth, "half_up"))
    for fx_node, node in graph.steps:
        if node is None:
            env[fx_node] = _copy_helper(graph, fx_node, new, root, lookup)
            producer, index = graph.picks.get(fx_node, (None, None))
            if index == 0 and producer.name in out_fp:  # the first output of a node with several: its fix pos
                env[fx_node] = new.call_function(fixpoint.fake_quant, (env[fx_node], out_fp[producer.name],
                                                                       bitwidth, "half_up"))
            continue
        quantize = node.name in out_fp and node.outputs == 1  # several outputs: quantized where taken (above)
        if node.op == g.INPUT:
            value = new.placeholder(fx_node.target)
        elif graph.runs_float(node) and not getattr(g.sim_form(node.op), "exact", False):
            # outside the quantized parts, or quant_off: torch's own call, in float
            value = _Lowering(graph, node, new, root, env, consts).copy()
            if node.op in g.PARAM_TYPES or node.op in g.NORM_TYPES:
                m = root.get_submodule(node.name)
                m.weight_fix_pos, m.bias_fix_pos, m.bitwidth = None, None, bitwidth
                m.float_part = ("the quantization-off flow (--nndct_quant_off) runs it in float" if graph.quant_off
                                else "it lies outside the model's quantized parts (between DeQuantStub and QuantStub)")
        elif node.op in g.PARAM_TYPES:
            target = add_module(node.name, _quantized_module(graph, node, info, bitwidth, bias_corr, params))
            value = new.call_module(target, (env[fx_node.all_input_nodes[0]],))
        elif node.op in g.NORM_TYPES:
            target = add_module(node.name, _quantized_norm(graph, node, info, bitwidth))
            value = new.call_module(target, (env[fx_node.all_input_nodes[0]],))
            norm_attrs.extend(env[a] for a in fx_node.all_input_nodes[1:] if a.op == "get_attr")
        else:
            lo = _Lowering(graph, node, new, root, env, consts, pool_shapes, trainable)
            form = g.sim_form(node.op)
            if form is None:
                value = lo.copy()
            else:
                value, quantizable = (form.train if trainable and form.train else form.lower)(lo)
                quantize = quantize and quantizable
        if quantize and node.inputs and all(i.shape_value for i in node.inputs):
            # a float computed from sizes: a 0-dim float32 tensor, as torch.jit traces it (ops.run_node)
            value = new.call_function(torch.as_tensor, (value,), {"dtype": torch.float32})
        if quantize:
            value = new.call_function(fixpoint.fake_quant, (value, out_fp[node.name], bitwidth, "half_up"))
        value.meta["nndct_node"] = node.name
        env[fx_node] = value
    new.output(map_arg(graph.output_node.args[0], lookup))
    for attr in norm_attrs:  # F.layer_norm's float weight and bias (F.prelu's slopes), now held by its module
        if attr in new.nodes and not attr.users:
            new.erase_node(attr)
            if hasattr(root, attr.target):
                delattr(root, attr.target)
    new._tracer_cls = LoweredTracer
    variants = None
    if pool_shapes is None and trainable is None:  # nndct decides a pool per forward: other sizes' graph on demand
        variants = PoolVariants(graph, lambda shapes: build_lowered(graph, plan, info, bitwidth, bias_corr, params,
                                                                    shapes))
    # the test-mode model is a LoweredModule also without pools: its copy keeps the drop-in's hooks (torch 1.13's
    # GraphModule copy passes no memo, and a hook holding the model recursed without end)
    gm = (LoweredModule if trainable is None else torch.fx.GraphModule)(root, new, class_name=graph.class_name)
    if variants is not None and variants.pools:
        gm.pool_variants = variants
    gm.quant_info = copy.deepcopy(info)
    gm.fast_finetuned = params is not None  # its parameters are param.pth's, not the float model's
    quantized_outputs = [out_fp[n.name] for n in graph.outputs if n.name in out_fp]
    gm.output_fix_pos = quantized_outputs[0] if quantized_outputs else None
    gm.written_inputs = written_inputs(gm, gm.graph)  # contract point 1
    if gm.written_inputs:
        gm.register_forward_pre_hook(OwnInputs(gm.written_inputs))
    gm.eval()
    return gm


class OwnInputs:
    """The lowered model's forward pre-hook (contract point 1): the inputs at ``indices`` (the ones
    its graph writes in place, ``fx.in_place.written_inputs``) replaced by copies before the graph runs,
    so that a call never writes the caller's tensors. A plain object, so the hook survives ``copy.deepcopy``."""

    def __init__(self, indices: Tuple[int, ...]) -> None:
        self.indices = tuple(indices)

    def __call__(self, module: nn.Module, args: Tuple[Any, ...]) -> Tuple[Any, ...]:
        """``args`` with a copy (``clone``, same values and dtype) of each tensor at ``indices``."""
        return tuple(a.clone() if i in self.indices and isinstance(a, torch.Tensor) else a
                     for i, a in enumerate(args))


class _Lowering:
    """The context of one node's lowering piece (``ops/sim_support.py``: ``lower(lo)``), given at call time."""

    def __init__(self, graph: SimGraph, node: SimNode, new: torch.fx.Graph, root: nn.Module,
                 env: Dict[torch.fx.Node, torch.fx.Node], consts: Dict[SimNode, Any],
                 pool_shapes: Optional[Dict[torch.fx.Node, Any]] = None, trainable: Optional[str] = None) -> None:
        self.graph, self.node, self.new, self.root, self.env, self.consts = graph, node, new, root, env, consts
        self.pool_shapes, self.trainable = pool_shapes or {}, trainable
        self.fx_node = node.fx_node
        self.module = graph.module(node) if self.fx_node.op == "call_module" else None

    @property
    def x(self) -> torch.fx.Node:
        """The node's first input in the new graph."""
        return self.env[self.fx_node.all_input_nodes[0]]

    @property
    def input_shape(self) -> Any:
        """The shape of the node's first input (NCHW): the example's, or the one ``build_lowered`` was given."""
        first = self.fx_node.all_input_nodes[0]
        return self.pool_shapes.get(first) or self.graph.example_shapes[first]

    def call_module(self, m: nn.Module) -> torch.fx.Node:
        """``m`` added under the node's name, called on :attr:`x`."""
        self.root.add_module(self.node.name, m)
        return self.new.call_module(self.node.name, (self.x,))

    def call(self, fn: Any, *args: Any) -> torch.fx.Node:
        """A ``call_function`` node of ``fn(*args)``."""
        return self.new.call_function(fn, args)

    def mul(self, value: torch.fx.Node, scale: float) -> torch.fx.Node:
        """``value * scale`` (``value`` itself for 1.0)."""
        return value if scale == 1.0 else self.new.call_function(torch.mul, (value, float(scale)))

    def copy(self) -> torch.fx.Node:
        """torch's own call copied, a number operand replaced by its (quantized) const's value."""
        node = self.node
        value = _copy_node(self.graph, node, self.new, self.root, self.env.__getitem__)
        if node.const_args:
            value.args = tuple(self.consts[node.const_args[i]] if i in node.const_args else a
                               for i, a in enumerate(value.args))
        return value


def _copy_helper(graph: SimGraph, fx_node: torch.fx.Node, new: torch.fx.Graph, root: nn.Module,
                 lookup) -> torch.fx.Node:
    """A helper step (``x.shape``, a chunk's tuple, a get_attr) copied as is; a get_attr's tensor
    is copied into the lowered module under a flat name."""
    if fx_node.op == "get_attr":
        name = "attr_" + fx_node.target.replace(".", "_")
        value = getattr_path(graph.root, fx_node.target)
        if isinstance(value, nn.Parameter):
            root.register_parameter(name, nn.Parameter(value.detach().clone(), requires_grad=False))
        elif isinstance(value, torch.Tensor):
            root.register_buffer(name, value.detach().clone())
        else:
            setattr(root, name, copy.deepcopy(value))
        return new.get_attr(name)
    return new.node_copy(fx_node, lookup)


def _copy_node(graph: SimGraph, node: SimNode, new: torch.fx.Graph, root: nn.Module, lookup) -> torch.fx.Node:
    fx_node = node.fx_node
    if fx_node.op == "call_module":
        m = copy.deepcopy(graph.module(node))
        if hasattr(m, "inplace"):
            m.inplace = False
        root.add_module(node.name, m)
        args = map_arg(fx_node.args, lookup)
        kwargs = map_arg(fx_node.kwargs, lookup)
        return new.call_module(node.name, args, kwargs)
    copied = new.node_copy(fx_node, lookup)
    if fx_node.op == "call_function":
        if "inplace" in copied.kwargs:
            copied.kwargs = dict(copied.kwargs, inplace=False)
        copied.target = OUT_OF_PLACE.get(copied.target, copied.target)
    elif fx_node.op == "call_method":
        copied.target = OUT_OF_PLACE_METHODS.get(copied.target, copied.target)
    return copied
