"""Run an exported ONNX file with ONNX Runtime and compare it with the simulation it came from.

ONNX Runtime runs on the CPUExecutionProvider, one thread, graph optimizations **disabled**
(``ORT_DISABLE_ALL``). Even the basic level rewrites float arithmetic: ConvAddFusion and
ConvMulFusion fold a following Add/Mul into the conv's weights and bias, and constant folding
evaluates subgraphs ahead of time; any of these can move a result by one ulp, and one ulp next to
a half-LSB tie flips a rounding. With optimizations off, every ONNX node runs as written, so the
comparison checks the semantics of the file itself, which is what a consumer of the file gets.
One thread keeps reductions in a fixed order.
"""
from typing import Any, Dict, List

import numpy as np
import torch

from ..errors import ExportError


def _as_list(result: Any) -> List[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and all(isinstance(r, torch.Tensor) for r in result):
        return list(result)
    raise ExportError("the simulated model must return a tensor or a tuple/list of tensors, got %s"
                      % type(result).__name__)


def _session(onnx_path: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(onnx_path, sess_options=options, providers=["CPUExecutionProvider"])


def verify_onnx(gm: torch.nn.Module, onnx_path: str, inputs: torch.Tensor) -> Dict[str, Any]:
    """Run ``onnx_path`` with ONNX Runtime on ``inputs`` and compare with ``gm(inputs)``.

    Args:
        gm: the lowered test-mode model the file was exported from; its attribute
            ``output_fix_pos`` (int or None) sets the LSB of the output.
        onnx_path: a file written by :func:`pipeline.export.export_onnx`.
        inputs: float32 batch of any size N, same sample shape as the export's example (e.g.
            NCHW). Not modified: the simulation runs on a copy.

    Returns:
        dict with ``flavour`` (from the file's metadata), ``max_abs_diff`` (float, over every
        output element; inf when either side is not finite), ``mismatches`` (int, elements whose
        values differ), ``elements`` (int), ``max_diff_lsb`` (``max_abs_diff * 2^output_fix_pos``,
        or None when ``output_fix_pos`` is None) and ``fraction_mismatched`` (mismatches/elements).

    Raises:
        ExportError: ``inputs`` is not a float32 tensor; the outputs differ in count or shape.
    """
    if not isinstance(inputs, torch.Tensor) or inputs.dtype != torch.float32:
        raise ExportError("verification needs a float32 torch.Tensor batch, got %s"
                          % getattr(inputs, "dtype", type(inputs).__name__))
    x = inputs.detach().cpu().contiguous()
    with torch.no_grad():
        expected = [t.detach().cpu().numpy() for t in _as_list(gm(x.clone()))]
    session = _session(onnx_path)
    flavour = session.get_modelmeta().custom_metadata_map.get("flavour")
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    if len(got) != len(expected) or any(g.shape != e.shape for g, e in zip(got, expected)):
        raise ExportError("ONNX outputs %s do not match the simulation's outputs %s in number or shape"
                          % ([g.shape for g in got], [e.shape for e in expected]))
    diff = np.concatenate([np.abs(g.astype(np.float64) - e.astype(np.float64)).ravel()
                           for g, e in zip(got, expected)])  # exact: float32 values in float64
    diff[np.isnan(diff)] = np.inf
    elements = int(diff.size)
    mismatches = int(np.count_nonzero(diff))
    max_abs = float(diff.max()) if elements else 0.0
    fix_pos = getattr(gm, "output_fix_pos", None)
    return {
        "flavour": flavour,
        "max_abs_diff": max_abs,
        "mismatches": mismatches,
        "elements": elements,
        "max_diff_lsb": None if fix_pos is None else max_abs * 2.0 ** fix_pos,
        "fraction_mismatched": mismatches / elements if elements else 0.0,
    }


def check_agreement(report: Dict[str, Any], max_lsb: float) -> None:
    """Raise ExportError when a :func:`verify_onnx` report exceeds ``max_lsb`` LSB of the output.

    ``max_lsb`` = 0 asks for bit-exactness (the ``exact`` flavour); 1 is the bound for ``qdq`` at
    a single quantization point (half-even vs half_up on ties). Without an output fix_pos
    (``max_diff_lsb`` None) an LSB is undefined and only a zero difference passes. The message
    gives every statistic of the report at once.
    """
    lsb = report.get("max_diff_lsb")
    ok = report["max_abs_diff"] == 0 if lsb is None else lsb <= max_lsb
    if ok:
        return
    raise ExportError(
        "ONNX (%s flavour) disagrees with the simulation: max_abs_diff=%g, max_diff_lsb=%s "
        "(allowed %s LSB%s), mismatches=%d of %d elements (fraction %.6f). For 'exact' any "
        "difference is an exporter bug: report it with the model; for 'qdq' differences come from "
        "half-even rounding on ties and grow where they add up: use the 'exact' flavour to check "
        "against the DPU." % (
            report.get("flavour"), report["max_abs_diff"], "n/a" if lsb is None else "%g" % lsb,
            max_lsb, "; the output has no fix_pos, so only 0 passes" if lsb is None else "",
            report["mismatches"], report["elements"], report["fraction_mismatched"]))
