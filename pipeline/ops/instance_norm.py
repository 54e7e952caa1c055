"""Instance normalization (``nndct_instance_norm``): ``nn.InstanceNorm2d``, a quantized float operator whose
weight and bias nndct's module quantizes as parameters in its own forward, then runs torch's
``F.instance_norm`` with them on its (quantized) input (``pytorch_nndct/nn/modules/instance_norm.py``,
``deephi_InstanceNorm.forward`` in its default mode: ``nndct_op_instancenorm_mode`` other than
``ipu_8bw``). Its output is quantized where its group ends there (a ReLU after it joins its group and
carries the fix position, as tests/data/refused_real/instance_norm has it).

The xmodel: nndct's ``xop_creator`` has no creator for the type (its ``instancenorm`` line is commented
out), so ``custom_xop`` writes the custom op ``nndct_instance_norm``: inputs x, then the quantized weight
and bias consts (one ``input`` argument); attributes ``affine``, ``eps``, ``num_features`` with its output
``shape`` and ``data_type``. It is no ``CustomOp`` of nndct's, so the layout pass carries NHWC through it
(``deploy_optimizer.layout_tranform``: a dim-transparent op): the file holds it in NHWC, and this unit's
kernel runs it so (the model's NCHW call cannot).

Not taken here: ``nn.InstanceNorm1d``/``3d`` and ``F.instance_norm`` (refused: no form of this project's
yet), and a module with ``track_running_stats=True`` (its test-mode call normalizes with running
statistics the xmodel's custom op does not carry).
"""
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import QuantizationError
from .record import Absent, OpRecord, OpSpec
from .refusal import ALL_STAGES, Known, NOT_YET, REAL_QUANTIZER
from .sim_support import TORCH, NormForm
from .xir_support import TO_NHWC, XirOp, attr, custom_def
from .xmodel_support import XmodelForm

INSTANCE_NORM = "nndct_instance_norm"

INSTANCE_NORM_CALL = Known(
    what="InstanceNorm", kind=NOT_YET, stops=ALL_STAGES, several=False,
    real="the real quantizer quantizes it as its own op, with input, weight, bias and output on fix-point grids",
    instead=REAL_QUANTIZER)


def instance_norm_type(m: nn.Module, strict: bool = True) -> str:
    """The type of an ``nn.InstanceNorm2d``: :data:`INSTANCE_NORM`.

    Raises:
        QuantizationError: with ``strict``, ``track_running_stats=True`` (the test-mode call normalizes with
            the running statistics, which the xmodel's ``nndct_instance_norm`` does not carry)."""
    if strict and m.track_running_stats:
        raise QuantizationError("InstanceNorm2d with track_running_stats=True: its test-mode call normalizes with "
                                "the running statistics, which this project's xmodel form does not carry; use "
                                "track_running_stats=False (the default), or " + REAL_QUANTIZER)
    return INSTANCE_NORM


def _forward(graph: Any, node: Any, x: torch.Tensor, weight: Optional[torch.Tensor],
             bias: Optional[torch.Tensor]) -> torch.Tensor:
    """nndct's module in its default mode: ``F.instance_norm`` of the (quantized) NCHW input with the given
    weight and bias, the input's own statistics (``use_input_stats``: ``training or not track_running_stats``),
    the module's momentum and eps. A new float32 tensor of the input's shape."""
    m = graph.module(node)
    momentum = 0.0 if m.momentum is None else m.momentum  # unused with the input's own statistics
    return F.instance_norm(x, m.running_mean, m.running_var, weight, bias, m.training or not m.track_running_stats,
                           momentum, m.eps)


def _module(graph: Any, node: Any) -> nn.Module:
    """The test-mode module: an ``nn.InstanceNorm2d`` with the node's module's hyper-parameters (its call is
    :func:`_forward`'s; the simulation sets its quantized weight and bias)."""
    m = graph.module(node)
    return nn.InstanceNorm2d(m.num_features, eps=m.eps, momentum=m.momentum, affine=m.affine,
                             track_running_stats=m.track_running_stats)


def _lower(lo: Any, node: Any) -> dict:
    """nndct's attributes of the node (``torch_op_def.TorchInstanceNorm``: ``num_features``, ``eps``,
    ``affine``), those ``custom_xop`` writes."""
    m = lo.module(node)
    return {"affine": bool(m.affine), "eps": float(m.eps), "num_features": int(m.num_features)}


def _create(w: Any, node: Any) -> None:
    """The custom op ``nndct_instance_norm``: x, then the quantized weight and bias consts (those it has),
    with the node's attributes and its output ``shape`` (NHWC) and ``data_type``."""
    w.custom(node, node.attrs)


def _kernel(run: Any, op: Any, ins: Any) -> torch.Tensor:
    """``nndct_instance_norm`` in the file's NHWC layout: ``F.instance_norm`` on the contiguous NCHW input with
    the weight and bias that follow it (none without ``affine``) and ``eps``, back in NHWC; bit for bit the
    simulation's call (:func:`_forward`, the input's own statistics)."""
    xs = ins["input"]
    affine = attr(op, "affine", "bool")
    if len(xs) != (3 if affine else 1):
        raise run.error(op, "takes x%s, got %d inputs" % (", weight, bias" if affine else "", len(xs)))
    weight, bias = (xs[1], xs[2]) if affine else (None, None)
    y = F.instance_norm(run.nchw(op, xs[0]), None, None, weight, bias, True, 0.0, attr(op, "eps", "double"))
    return y.permute(TO_NHWC)


RECORD = OpRecord(
    family="instance_norm",
    specs={INSTANCE_NORM: OpSpec("float", True, False, False)},
    module_rules={nn.InstanceNorm2d: instance_norm_type},
    signatures={INSTANCE_NORM: (("input", "running_mean", "running_var", "weight", "bias", "use_input_stats",
                                 "momentum", "eps"),
                                {"running_mean": None, "running_var": None, "weight": None, "bias": None,
                                 "use_input_stats": True, "momentum": 0.1, "eps": 1e-5})},
    roles={"norm": (INSTANCE_NORM,)},
    approximation=Absent("a float operator on the CPU: torch's kernel on quantized weight and bias"),
    source="pytorch_nndct/nn/modules/instance_norm.py, pytorch_nndct/parse/torch_op_def.py (TorchInstanceNorm), "
           "nndct_shared/compile/xop_creator.py (custom_xop), nndct_shared/base/key_names.py (INSTANCE_NORM)",
    onnx={INSTANCE_NORM: Absent("no form giving torch's bits written yet (torch's CPU kernel's mean and "
                                "variance, step by step, as the layer norm's form restates its kernel)")},
    dpu_rule={INSTANCE_NORM: Absent("a float operator of the quantizer")},
    xmodel={INSTANCE_NORM: XmodelForm(_lower, _create)},
    xir_ops={INSTANCE_NORM: XirOp(custom_def(INSTANCE_NORM), _kernel, INSTANCE_NORM)},  # custom: a float op
    traced={INSTANCE_NORM: ("instance_norm",)},
    refusals={nn.InstanceNorm1d: INSTANCE_NORM_CALL, nn.InstanceNorm3d: INSTANCE_NORM_CALL,
              F.instance_norm: INSTANCE_NORM_CALL},
    sim={INSTANCE_NORM: TORCH},
    norm={INSTANCE_NORM: NormForm(_forward, _module)},
)
