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
from .xir_support import TO_NCHW, TO_NHWC, CustomKernel
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


def _kernel(op: Any, xs: Any) -> torch.Tensor:
    """``nndct_layer_norm {normalized_shape, eps, elementwise_affine}``, its quantized gamma and beta as inputs
    (``_lower_layer_norm``): ``F.layer_norm`` over the trailing ``normalized_shape`` of the model's tensor (the
    simulation's call, bit for bit, on the same values). The file does not say which tensor that is where
    nndct dropped a permute to channels-last before it (ConvNeXt's ``x.permute(0, 2, 3, 1)`` after a conv:
    the conv's NHWC output is the norm's input, ``tests/data/refused_real/layernorm_channels_last``): a 4-D
    value the interpreter keeps as an NHWC view of NCHW memory is read as that NCHW tensor where only its
    trailing dims are ``normalized_shape``, else as it is held (the channels-last reading, also where both
    fit: C = W). A fallback kernel (not ``complete``): the writer's verification gives the simulation's call.

    Raises:
        ValueError: inputs other than x, gamma and beta (``elementwise_affine``) or x alone; no reading of x
            ends in ``normalized_shape``."""
    affine = bool(op.attr("elementwise_affine"))
    if len(xs) != (3 if affine else 1):
        raise ValueError("nndct_layer_norm takes x%s; the op has %d inputs" % (", gamma, beta" if affine else "",
                                                                              len(xs)))
    weight, bias = (xs[1], xs[2]) if affine else (None, None)
    shape, eps = [int(d) for d in op.attr("normalized_shape")], float(op.attr("eps"))
    x = xs[0]

    def fits(t: torch.Tensor) -> bool:
        return list(t.shape[t.dim() - len(shape):]) == shape
    if x.dim() == 4 and not x.is_contiguous() and x.permute(TO_NCHW).is_contiguous() \
            and fits(x.permute(TO_NCHW)) and not fits(x):
        return F.layer_norm(x.permute(TO_NCHW), shape, weight, bias, eps).permute(TO_NHWC)
    if not fits(x):
        raise ValueError("normalized_shape %s is not the trailing dims of the input %s" % (shape, list(x.shape)))
    return F.layer_norm(x, shape, weight, bias, eps)


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
                   "simulation's call for it, else its custom kernel)"),
    custom_kernels={LAYER_NORM: CustomKernel(_kernel, False)},
    traced={LAYER_NORM: ("layer_norm",)},
    refusals={},
    sim={LAYER_NORM: TORCH},
)
