"""Layer norm (``nndct_layer_norm``): a quantized float operator whose gamma and beta nndct's module
quantizes as parameters in its own forward, then runs torch's operator with them
(``pytorch_nndct/nn/modules/layernorm.py``)."""
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .onnx_form import NO_LOWERING, Unsupported
from .record import Absent, OpRecord, OpSpec
from .sim_support import TORCH
from .xmodel_support import XmodelForm, custom_with_attrs

LAYER_NORM = "nndct_layer_norm"


def _onnx_layer_norm(b: Any, node: Any, mod: Optional[nn.LayerNorm]) -> str:
    """An ``nn.LayerNorm`` of the lowered model (quantized weight and bias with their fix
    positions, or none): ``Reshape`` to rows of the normalized size, torch's CPU kernel step by step
    (the builder's ``layer_norm_kernel`` and ``layer_norm_rows``), and ``Reshape`` back to the input's
    shape. ``F.layer_norm`` (no module: no quantized weight and bias) is not written."""
    if mod is None:
        raise Unsupported(NO_LOWERING)
    if len(node.args) != 1 or node.kwargs:
        raise Unsupported("expected one input, got %d args and kwargs %s" % (len(node.args), sorted(node.kwargs)))
    n_elems = int(np.prod(mod.normalized_shape))
    bits = getattr(mod, "bitwidth", None)
    with torch.no_grad():
        gamma = None if mod.weight is None else mod.weight.detach().reshape(-1)
        beta = None if mod.bias is None else mod.bias.detach().reshape(-1)
    kernel = b.layer_norm_kernel(n_elems, gamma, beta, mod.eps)
    x = b.tensor(node.args[0])
    name = node.name
    rows = b.op("Reshape", [x, b.ints(name + "/rows_shape", [-1, n_elems])], name + "/rows")
    g = None if gamma is None else b.param(node.target, "weight", gamma, getattr(mod, "weight_fix_pos", None), bits)
    be = None if beta is None else b.param(node.target, "bias", beta, getattr(mod, "bias_fix_pos", None), bits)
    y = b.layer_norm_rows(name, rows, n_elems, g, be, mod.eps, kernel)
    return b.op("Reshape", [y, b.op("Shape", [x], name + "/shape")], name)


def _lower_layer_norm(lo: Any, node: Any) -> dict:
    """nndct's attributes of a layer norm (``parser.py``, the ``nndct_layer_norm`` node's
    ``normalized_shape``, ``eps``, ``elementwise_affine``): the module's, or those ``F.layer_norm`` is
    called with (an affine call gives a weight)."""
    m = lo.module(node)
    if m is not None:
        shape, eps, affine = m.normalized_shape, m.eps, m.elementwise_affine
    else:
        args = lo.call_args(node)
        shape, eps, affine = args["normalized_shape"], args["eps"], args.get("weight") is not None
    shape = [int(shape)] if isinstance(shape, int) else [int(d) for d in shape]
    return {"normalized_shape": shape, "eps": float(eps), "elementwise_affine": bool(affine)}


RECORD = OpRecord(
    family="layer_norm",
    specs={LAYER_NORM: OpSpec("float", True, False, False)},
    modules={nn.LayerNorm: LAYER_NORM},
    functions={F.layer_norm: LAYER_NORM},
    signatures={LAYER_NORM: (("input", "normalized_shape", "weight", "bias", "eps"),
                             {"weight": None, "bias": None, "eps": 1e-5})},
    roles={"norm": (LAYER_NORM,)},
    approximation=Absent("a float operator on the CPU: torch's kernel on quantized gamma and beta"),
    source="pytorch_nndct/nn/modules/layernorm.py",
    onnx={LAYER_NORM: _onnx_layer_norm},
    dpu_rule={LAYER_NORM: Absent("a float operator of the quantizer")},
    xmodel={LAYER_NORM: XmodelForm(_lower_layer_norm, custom_with_attrs)},
    xir_ops=Absent("a custom op (nndct_layer_norm: a type XIR does not define; the interpreter runs the "
                   "simulation's call for it)"),
    custom_kernels={LAYER_NORM: Absent("the caller's float_ops (the simulation's call on its quantized gamma "
                                       "and beta) compute it")},
    traced={LAYER_NORM: ("layer_norm",)},
    refusals={},
    sim={LAYER_NORM: TORCH},
)
