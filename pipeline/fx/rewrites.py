"""The quantizer's rewrites of the traced float graph, before nodes are named (``capture``):
module swaps (``pytorch_nndct/qproc/utils.py`` ``parse_module``: ReLU6, SiLU, a layer norm without
affine parameters), Dropout/Identity removal, and
Conv+BatchNorm folding or, for any other BatchNorm, nndct's scale/offset conversion
(``fuse_conv_bn.py``; golden_wide README for the unfused BatchNorm1d). All in float32, in
nndct's order of operations. They change capture's own deep copy of the model only."""
import operator
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
import torch.fx
from torch import nn

from ..errors import QuantizationError
from ..ops.conv import CONV_TYPES, conv_type

REMOVED_MODULES = (nn.Dropout, nn.Dropout2d, nn.Dropout1d, nn.Identity) if hasattr(nn, "Dropout1d") \
    else (nn.Dropout, nn.Dropout2d, nn.Identity)
REMOVED_FUNCTIONS = (torch.nn.functional.dropout, torch.nn.functional.dropout2d)


@dataclass(frozen=True)
class Rewrites:
    """The switches of the quantizer's module swaps, as plain flags; the quantizer's config decides
    them (``QuantConfig.rewrites()``). The other rewrites (Dropout/Identity removal, BN folding, an
    affine layer norm for one without parameters) have no switch.

    Attributes:
        relu6_to_relu: every ``nn.ReLU6`` becomes ``nn.ReLU`` (nndct: CLE on, or ``convert_relu6_to_relu``).
        silu_to_hswish: every ``nn.SiLU`` becomes ``nn.Hardswish`` (``convert_silu_to_hswish``).
    """

    relu6_to_relu: bool = False
    silu_to_hswish: bool = False


def _set_submodule(root: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, leaf = path.rpartition(".")
    parent = root.get_submodule(parent_path) if parent_path else root
    setattr(parent, leaf, module)


def _swaps(model: nn.Module, rewrites: Rewrites) -> List[Tuple[str, nn.Module, nn.Module]]:
    swaps = []
    for name, m in model.named_modules():
        if isinstance(m, nn.ReLU6) and rewrites.relu6_to_relu:
            swaps.append((name, m, nn.ReLU(m.inplace)))
        elif isinstance(m, nn.SiLU) and rewrites.silu_to_hswish:
            swaps.append((name, m, nn.Hardswish()))
        elif isinstance(m, nn.LayerNorm) and not m.elementwise_affine:
            swaps.append((name, m, _affine_layer_norm(name, m)))
    return swaps


def _affine_layer_norm(name: str, m: nn.LayerNorm) -> nn.LayerNorm:
    """nndct's ``replace_layernorm_affine_false_with_true`` (``parse_module``): a layer norm
    without affine parameters becomes a plain ``nn.LayerNorm`` with weight 1 and bias 0, which
    the quantizer then quantizes as any layer norm's (its warning ``QUANTIZER_TORCH_LAYERNORM_AFFINE``).
    nndct does this to subclasses too, dropping their own forward: refused here with the reason."""
    if type(m) is not nn.LayerNorm:
        raise QuantizationError(
            "module %r (%s, a LayerNorm subclass) has elementwise_affine=False: the real quantizer replaces "
            "every such layer norm by a plain nn.LayerNorm (weight 1, bias 0), which drops this class's own "
            "forward(); give it elementwise_affine=True (weight 1, bias 0 compute the same)"
            % (name, type(m).__name__))
    return nn.LayerNorm(m.normalized_shape, eps=m.eps, elementwise_affine=True)


def swaps_keep_graph(model: nn.Module, rewrites: Rewrites) -> bool:
    """True when ``swap_modules`` would leave the fx trace of ``model`` as it is: every swapped module
    is a torch.fx leaf (a torch.nn module, not a subclass defined elsewhere), as its replacement is."""
    tracer = torch.fx.Tracer()
    return all(tracer.is_leaf_module(old, name) for name, old, _ in _swaps(model, rewrites))


def swap_modules(model: nn.Module, rewrites: Rewrites) -> None:
    """Replace, in place in ``model`` (a working copy, never the caller's model), the modules
    ``rewrites`` and nndct's ``parse_module`` swap (see :class:`Rewrites`).

    Raises:
        QuantizationError: ``model`` itself would be swapped, or a LayerNorm subclass without
            affine parameters."""
    for name, _, new in _swaps(model, rewrites):
        if not name:
            raise QuantizationError("the model itself is a single %s; wrap it in a module with a "
                                    "forward to quantize it" % type(new).__name__)
        _set_submodule(model, name, new)


def _user_function(target: object) -> bool:
    """A call_function target that is neither torch's nor Python's: a function the model's code
    wrapped for torch.fx (``torch.fx.wrap``), which torch.fx keeps as one call."""
    module = getattr(target, "__module__", None) or ""
    return callable(target) and not (module == "torch" or module.startswith("torch.")
                                     or module in ("_operator", "operator", "builtins", "math"))


class _PassthroughFinder(torch.fx.Interpreter):
    """Runs the graph once; records the candidate calls whose result is one of their input
    tensors, unchanged (no in-place op bumped its version)."""

    def __init__(self, root: nn.Module, graph: torch.fx.Graph, candidates: List[torch.fx.Node]) -> None:
        super().__init__(root, graph=graph)
        self.candidates = set(candidates)
        self.found = []  # type: List[Tuple[torch.fx.Node, torch.fx.Node]]

    def run_node(self, n: torch.fx.Node):
        if n not in self.candidates:
            return super().run_node(n)
        inputs = [(a, self.env[a]) for a in n.all_input_nodes if isinstance(self.env.get(a), torch.Tensor)]
        versions = [v._version for _, v in inputs]
        result = super().run_node(n)
        for (a, v), version in zip(inputs, versions):
            if result is v and v._version == version:
                self.found.append((n, a))
                break
        return result


def ran_on_example(finder: torch.fx.Interpreter, examples: Tuple[torch.Tensor, ...]) -> bool:
    """Run ``finder`` (an fx Interpreter that records what a rewrite looks for) once on a copy of ``examples``,
    without grad; False when the model's own run fails (capture's shape run reports that failure)."""
    try:
        with torch.no_grad():
            finder.run(*[e.detach().cpu().clone() for e in examples])
    except Exception:  # the model's own failure
        return False
    return True


def remove_traced_passthrough(root: nn.Module, graph: torch.fx.Graph, examples: Tuple[torch.Tensor, ...]) -> None:
    """Remove the calls of model-wrapped functions (``torch.fx.wrap``) that return their input
    unchanged on the example, as torchvision's ``stochastic_depth`` does in eval mode: torch.fx
    keeps such a call as a node, but torch.jit (nndct's trace) records no op for it, so nndct has no
    node there and numbers every later node one lower. Runs the graph on a copy of the example
    only when such a call is in it; a failing run removes nothing (capture's own run reports it)."""
    candidates = [n for n in graph.nodes if n.op == "call_function" and _user_function(n.target)]
    if not candidates:
        return
    finder = _PassthroughFinder(root, graph, candidates)
    if not ran_on_example(finder, examples):
        return
    for node, source in finder.found:
        node.replace_all_uses_with(source)
        graph.erase_node(node)


def functional_linear_to_module(root: nn.Module, graph: torch.fx.Graph) -> None:
    """``F.linear(x, m.weight, m.bias)`` on an ``nn.Linear`` ``m``'s own parameters becomes the call
    ``m(x)``: nndct's parser makes a dense node of any ``aten::linear`` whose weight and bias are a
    module's parameters, named by that module (``features.1.0.attn.qkv.weight``), as torchvision's
    ``shifted_window_attention`` calls it. Only when the call is the module's one use; a linear on
    other tensors stays a float operator."""
    uses = {}  # type: dict
    found = []
    for node in graph.nodes:
        if node.op == "call_module":
            uses[node.target] = uses.get(node.target, 0) + 1
        if node.op != "call_function" or node.target is not torch.nn.functional.linear:
            continue
        w = node.args[1] if len(node.args) > 1 else node.kwargs.get("weight")
        b = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        if not (isinstance(w, torch.fx.Node) and w.op == "get_attr" and w.target.endswith(".weight")):
            continue
        path = w.target[:-len(".weight")]
        try:
            m = root.get_submodule(path)
        except AttributeError:
            continue
        bias_ok = (b is None and m.bias is None) if not isinstance(b, torch.fx.Node) else \
            (b.op == "get_attr" and b.target == path + ".bias")
        if type(m) is nn.Linear and bias_ok:
            uses[path] = uses.get(path, 0) + 1
            found.append((node, path, [a for a in (w, b) if isinstance(a, torch.fx.Node)]))
    for node, path, attrs in found:
        if uses[path] != 1:
            continue
        with graph.inserting_before(node):
            call = graph.call_module(path, (node.args[0],))
        node.replace_all_uses_with(call)
        graph.erase_node(node)
        for a in attrs:
            if not a.users:
                graph.erase_node(a)


_COMPARISONS = (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge)


def _shape_helper(node: torch.fx.Node) -> bool:
    """A pure step on sizes: ``x.shape``, ``x.size(...)``, ``x.dim()``, an item of one, or a
    comparison (the operand of a ``torch._assert``)."""
    if node.op == "call_method":
        return node.target in ("size", "dim")
    if node.op != "call_function":
        return False
    if node.target is getattr:
        return node.args[1] == "shape"
    if node.target is operator.getitem:
        return isinstance(node.args[0], torch.fx.Node) and _shape_helper(node.args[0])
    return node.target in _COMPARISONS


def remove_shape_checks(graph: torch.fx.Graph) -> None:
    """Remove ``torch._assert`` calls and the size steps nothing uses (``n, c, h, w = x.shape``
    with ``c`` unused, the sizes an assert compared). torch.jit records neither: an assert on a
    traced size is a Python bool, and unused ``aten::size`` nodes are dead code the trace drops,
    so nndct has no node there (torchvision's ViT checks the image size this way)."""
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch._assert:
            graph.erase_node(node)
    changed = True
    while changed:
        changed = False
        for node in reversed(list(graph.nodes)):
            if not node.users and _shape_helper(node):
                graph.erase_node(node)
                changed = True


def reciprocal_divisions(graph: torch.fx.Graph) -> None:
    """``c / x`` (a Python number divided by a tensor): torch runs ``Tensor.__rtruediv__``, which is
    ``x.reciprocal() * c`` (``torch/_tensor.py``), so torch.jit records ``aten::reciprocal`` then
    ``aten::mul`` by the number, and nndct's parser makes them a float operator ``aten_reciprocal`` and an
    ``nndct_elemwise_mul`` whose number is a const node (``tests/data/refused_real/rdiv``). The division
    becomes those two calls; the values are torch's own."""
    for node in list(graph.nodes):
        if not (node.op == "call_function" and node.target in (operator.truediv, operator.itruediv)
                and len(node.args) == 2 and isinstance(node.args[0], (int, float))
                and not isinstance(node.args[0], bool) and isinstance(node.args[1], torch.fx.Node)):
            continue
        with graph.inserting_before(node):
            value = graph.call_function(operator.mul, (graph.call_function(torch.reciprocal, (node.args[1],)),
                                                       node.args[0]))
        node.replace_all_uses_with(value)
        graph.erase_node(node)


def remove_passthrough(root: nn.Module, graph: torch.fx.Graph) -> None:
    for node in list(graph.nodes):
        drop = (node.op == "call_module" and isinstance(root.get_submodule(node.target), REMOVED_MODULES)) \
            or (node.op == "call_function" and node.target in REMOVED_FUNCTIONS)
        if drop:
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)


def bn_scale_offset(bn: nn.Module) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(s, beta - mean * s)`` with ``s = gamma / sqrt(var + eps)``, float32 (eval statistics;
    ``affine=False`` counts as gamma 1, beta 0), nndct's order of operations.

    nndct computes this with numpy (``nndct_shared/optimization/fuse_conv_bn.py``), whose float32
    square root is correctly rounded; torch's vectorized CPU ``sqrt`` is not always (it differs from
    numpy's in the last bit for some inputs, and by vector unit), so the root is taken in float64 and
    rounded once to float32, which is the correctly rounded float32 root."""
    mean = bn.running_mean.detach().float()
    var = bn.running_var.detach().float()
    gamma = bn.weight.detach().float() if bn.weight is not None else torch.ones_like(mean)
    beta = bn.bias.detach().float() if bn.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt((var + bn.eps).double()).float()
    return scale, beta - mean * scale


def fold_bn_params(weight: torch.Tensor, bias: Optional[torch.Tensor], bn: nn.BatchNorm2d,
                   out_dim: int):
    """Fold BatchNorm statistics into conv parameters (float32, nndct's order of operations).

    Args:
        weight: conv weight; ``out_dim`` is its output-channel dimension (0 for Conv2d, 1 for
            ConvTranspose2d).
        bias: conv bias or None.
        bn: the BatchNorm2d (eval statistics; ``affine=False`` counts as gamma 1, beta 0).

    Returns:
        ``(weight, bias)`` new float32 tensors (copies).
    """
    scale, offset = bn_scale_offset(bn)
    shape = [1] * weight.dim()
    w = weight.detach().float()
    if out_dim == 1 and w.shape[1] != scale.numel():  # grouped transposed conv: (in, out/g, kh, kw)
        groups = scale.numel() // w.shape[1]
        w = w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
        shape = [groups, 1, w.shape[2]] + [1] * (w.dim() - 3)
        new_w = (w * scale.reshape(shape)).reshape(weight.shape)
    else:
        shape[out_dim] = scale.numel()
        new_w = w * scale.reshape(shape)
    new_b = offset.clone() if bias is None else bias.detach().float() * scale + offset
    return new_w, new_b


def _converted_bn(bn: nn.Module) -> nn.Module:
    """A copy of ``bn`` as nndct runs an unfused BatchNorm: weight = s, bias = offset, mean 0,
    var 1, eps 0 (``bn_scale_offset``)."""
    scale, offset = bn_scale_offset(bn)
    new = type(bn)(scale.numel(), eps=0.0)
    new.weight = nn.Parameter(scale, requires_grad=False)
    new.bias = nn.Parameter(offset, requires_grad=False)
    new.running_mean.zero_()
    new.running_var.fill_(1.0)
    return new.eval()


def fold_bn(root: nn.Module, graph: torch.fx.Graph) -> Dict[str, str]:
    """Fold each BatchNorm2d that follows a Conv2d/ConvTranspose2d into it (in ``root``, capture's own
    copy) and convert every other BatchNorm to nndct's scale/offset form (module docstring).

    Returns:
        conv module path -> the path of the BatchNorm folded into it (paths of the traced model:
        QAT trains the two apart, ``pipeline.quantizers.sim.qat``).
    """
    folded = {}  # type: Dict[str, str]
    for node in list(graph.nodes):
        if node.op != "call_module" or not isinstance(root.get_submodule(node.target),
                                                      nn.modules.batchnorm._BatchNorm):
            continue
        bn = root.get_submodule(node.target)
        src = node.args[0]
        conv = root.get_submodule(src.target) if isinstance(src, torch.fx.Node) and src.op == "call_module" else None
        if not isinstance(bn, nn.BatchNorm2d) or not isinstance(conv, (nn.Conv2d, nn.ConvTranspose2d)) \
                or conv_type(conv, False) not in CONV_TYPES:
            # nndct keeps it as a batch_norm node (QUANTIZER_TORCH_NOT_FUSED_BN); its conv+BN patterns
            # (optimization/commander.py) are of conv types, which a padding='same' conv is not (ops/conv.py)
            _set_submodule(root, node.target, _converted_bn(bn))
            continue
        if len(src.users) != 1:
            raise QuantizationError(
                "node %r: the output of conv %r is used by %d nodes besides its BatchNorm; the real "
                "quantizer would fold the BatchNorm into the conv and change what the other users "
                "see. Use the conv output only through the BatchNorm." % (node.name, src.target, len(src.users) - 1))
        out_dim = 1 if isinstance(conv, nn.ConvTranspose2d) else 0
        w, b = fold_bn_params(conv.weight, conv.bias, bn, out_dim)
        # root is capture's own deep copy, so its conv is folded in place (every node calling
        # this module names the same target path, so none could still see the unfolded conv)
        conv.weight = nn.Parameter(w, requires_grad=False)
        conv.bias = nn.Parameter(b, requires_grad=False)
        folded[src.target] = node.target
        node.replace_all_uses_with(src)
        graph.erase_node(node)
    return folded
