"""``param.pth``: the finetuned parameters in nndct's layout (``torch.save(quant_model.state_dict())``).

:func:`param_state_dict` builds the dict nndct writes; :func:`params_from_state_dict` reads one back
(checked against the model); :func:`module_key` is nndct's generated module name of a node.
"""
from collections import OrderedDict
from typing import Any, Dict, Optional

import torch

from ...errors import QuantizationError
from ... import ops as g
from ...fx.graph import SimGraph, SimNode
from .frozen import Params

def module_key(node: SimNode) -> str:
    """nndct's generated module name of a node, ``module_<i>``, ``i`` the number ending its name."""
    return "module_%s" % node.name.rsplit("_", 1)[1]


def param_state_dict(graph: SimGraph, params: Params,
                     norm_params: Optional[Params] = None) -> "OrderedDict[str, torch.Tensor]":
    """``param.pth``'s content as nndct writes it (``quant_model.state_dict()``, which its test mode
    loads strictly): first the model's parameters its generated module holds as attributes (those
    the graph takes directly, e.g. a layer scale: ``<path with _>``, float), then ``module_<i>.weight``
    / ``.bias`` per parameter node and per layer norm (``norm_params``: rounded), ``i`` the node's
    index in nndct's graph (the number ending its name)."""
    out = OrderedDict()  # type: OrderedDict[str, torch.Tensor]
    bound = set(name for node in graph.nodes for name in node.param_names.values())
    prefix = graph.class_name + "::"
    for fx_node in graph.fx_graph.nodes:
        name = prefix + str(fx_node.target)
        if fx_node.op == "get_attr" and name not in bound and isinstance(graph.parameter(name), torch.nn.Parameter):
            out.setdefault(str(fx_node.target).replace(".", "_"), graph.parameter(name).detach().clone())
    norm_params = norm_params or {}
    for node in graph.nodes:
        if node.name not in params and node.name not in norm_params:
            continue
        key = module_key(node)
        w, b = params[node.name] if node.name in params else norm_params[node.name]
        if w is not None:
            out[key + ".weight"] = w.detach().clone()
        if b is not None:
            out[key + ".bias"] = b.detach().clone()
    return out


def params_from_state_dict(graph: SimGraph, state: Dict[str, Any], where: str) -> Params:
    """node name -> (weight, bias) from a ``param.pth`` dict (see :func:`param_state_dict`).

    Raises:
        QuantizationError: a parameter node's key is missing or has another shape (the file was made
            for another model), naming the key.
    """
    out = OrderedDict()  # type: Params
    for node in graph.nodes:
        if node.op not in g.PARAM_TYPES:
            continue
        m = graph.module(node)
        key = module_key(node)
        pair = []
        for kind, ref in (("weight", m.weight), ("bias", m.bias)):
            if ref is None:
                pair.append(None)
                continue
            t = state.get(key + "." + kind)
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(ref.shape) or not t.is_floating_point():
                found = "nothing" if t is None else getattr(t, "shape", type(t).__name__)
                raise QuantizationError(
                    "%s has no %s.%s tensor of shape %s for %s (found %s): it was made for another model; run "
                    "the calibration with fast_finetune again" % (where, key, kind, list(ref.shape),
                                                                  graph.full_name(node), found))
            if not bool(torch.isfinite(t).all()):
                raise QuantizationError("%s: %s holds NaN or Inf; run the calibration with fast_finetune again"
                                        % (where, key + "." + kind))
            pair.append(t.detach().to(torch.float32))
        out[node.name] = (pair[0], pair[1])
    return out
