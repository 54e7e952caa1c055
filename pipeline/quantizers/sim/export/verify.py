"""Run an exported ONNX file with ONNX Runtime and compare it with the simulation it came from.

By default ONNX Runtime runs on the CPUExecutionProvider, one thread, graph optimizations
**disabled** (``ORT_DISABLE_ALL``). Even the basic level rewrites float arithmetic: ConvAddFusion
and ConvMulFusion fold a following Add/Mul into the conv's weights and bias, constant folding
evaluates subgraphs ahead of time, and QDQ fusions replace QuantizeLinear/DequantizeLinear pairs
by integer kernels with their own requantization; any of these can move a result by one ulp, and
one ulp next to a half-LSB tie flips a rounding. With optimizations off, every ONNX node runs as
written, so the comparison checks the semantics of the file itself. One thread keeps reductions
in a fixed order. ``optimized=True`` runs with ONNX Runtime's default level (``ORT_ENABLE_ALL``),
which is what a consumer of the file usually gets: its differences are reported, never bounded,
since they depend on the ONNX Runtime version.

The ``qdq`` flavour rounds every quantization point half to even (ONNX ``QuantizeLinear``), where
the DPU rounds activations half_up. :func:`qdq_reference` is the simulation with exactly that
change; the qdq file must equal it bit for bit (with optimizations off), which is the exact check
of the qdq export. The simulation itself (and the ``exact`` flavour) is what the DPU computes.
"""
from typing import Any, Dict, List, Optional

import copy

import numpy as np
import torch

from ....errors import ExportError
from .... import fixpoint
from ..finite import agreement, check_compared, check_inputs


def _as_list(result: Any) -> List[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and all(isinstance(r, torch.Tensor) for r in result):
        return list(result)
    raise ExportError("the simulated model must return a tensor or a tuple/list of tensors, got %s"
                      % type(result).__name__)


def _session(onnx_path: str, optimized: bool) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(onnx_path, sess_options=options, providers=["CPUExecutionProvider"])


def _fake_quant_half_even(x: torch.Tensor, fix_pos: int, bitwidth: int, method: str) -> torch.Tensor:
    """fake_quant with ties to even, as QuantizeLinear -> DequantizeLinear (scale 2^-fix_pos, zero point 0)."""
    lo, hi = -(1 << (bitwidth - 1)), (1 << (bitwidth - 1)) - 1
    return torch.round(x * 2.0 ** fix_pos).clamp_(lo, hi).mul_(2.0 ** -fix_pos)


def qdq_reference(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The simulation as the qdq flavour computes it: every ``fake_quant`` rounds half to even.

    A reference mode for checking qdq files only: the DPU rounds activations half_up, so this
    model is *not* the DPU's arithmetic. Weights and bias are parameters already on their grid
    (rounded by the simulation, stored as int8 codes in the qdq file), so they are unchanged.

    Args:
        gm: a lowered test-mode model (``pipeline.quantizers.sim``). Not modified.

    Returns:
        A new GraphModule on a copy of ``gm``'s graph, sharing its modules and parameters (read,
        never written), with its ``output_fix_pos``, whose ``fake_quant`` nodes call a half-to-even
        rounding with the same fix_pos, bit width and clamp. Not a ``copy.deepcopy`` of ``gm``: that
        would copy whatever ``gm``'s hooks hold (the drop-in's hooks are bound methods of the
        quantizer that holds ``gm``), and torch 1.13's ``GraphModule.__deepcopy__`` drops the memo,
        so such a cycle recurses without end.
    """
    ref = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph), class_name=type(gm).__name__)
    ref.output_fix_pos = getattr(gm, "output_fix_pos", None)
    for node in ref.graph.nodes:
        if node.op == "call_function" and node.target is fixpoint.fake_quant:
            node.target = _fake_quant_half_even
    ref.recompile()
    return ref


def verify_onnx(gm: torch.nn.Module, onnx_path: str, inputs: torch.Tensor, optimized: bool = False) -> Dict[str, Any]:
    """Run ``onnx_path`` with ONNX Runtime on ``inputs`` and compare with ``gm(inputs)``.

    Args:
        gm: the lowered test-mode model the file was exported from; its attribute
            ``output_fix_pos`` (int or None) sets the LSB of the output.
        onnx_path: a file written by :func:`pipeline.quantizers.sim.export.export_onnx`.
        inputs: float32 batch of any size N, same sample shape as the export's example (e.g.
            NCHW), or a tuple of them (one per model input, in order). Not modified: the
            simulation runs on copies.
        optimized: run with ONNX Runtime's default graph optimizations instead of none.

    NaN and inf follow ``pipeline.quantizers.sim.finite``: an input holding them is refused before
    anything runs; an output element NaN or inf on one side only (or of another kind) differs, one
    NaN or inf alike on both sides is not compared and never counts as agreement.

    Returns:
        dict with ``flavour`` (from the file's metadata), ``max_abs_diff`` (float, over the compared
        elements; inf when one side only is not finite), ``mismatches`` (int, compared elements whose
        values differ), ``elements`` (int, output elements compared), ``nonfinite`` (int, output
        elements NaN or inf alike on both sides, not compared), ``max_diff_lsb``
        (``max_abs_diff * 2^output_fix_pos``, or None when ``output_fix_pos`` is None),
        ``fraction_mismatched`` (mismatches/elements) and ``ort_optimizations`` (``"all"`` or ``"none"``).

    Raises:
        ExportError: ``inputs`` is not a float32 tensor or holds NaN or inf; the outputs differ in
            count or shape; no output element could be compared (all NaN or inf alike).
    """
    batch = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    for x in batch:
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
            raise ExportError("verification needs a float32 torch.Tensor batch (one per model input), got %s"
                              % getattr(x, "dtype", type(x).__name__))
    xs = [x.detach().cpu().contiguous() for x in batch]
    check_inputs(xs, "ONNX", "verify on finite data")
    with torch.no_grad():
        expected = [t.detach().cpu().numpy() for t in _as_list(gm(*[x.clone() for x in xs]))]
    session = _session(onnx_path, optimized)
    flavour = session.get_modelmeta().custom_metadata_map.get("flavour")
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(xs):
        raise ExportError("the ONNX file takes %d inputs (%s), got %d tensors" % (len(names), ", ".join(names), len(xs)))
    got = session.run(None, {name: x.numpy() for name, x in zip(names, xs)})
    if len(got) != len(expected) or any(g.shape != e.shape for g, e in zip(got, expected)):
        raise ExportError("ONNX outputs %s do not match the simulation's outputs %s in number or shape"
                          % ([g.shape for g in got], [e.shape for e in expected]))
    # values compared exactly (float32 in float64); NaN and inf by finite.py's rule
    parts = [agreement(torch.from_numpy(np.asarray(g)), torch.from_numpy(np.asarray(e)), bits=False)
             for g, e in zip(got, expected)]
    elements, nonfinite = sum(p.elements for p in parts), sum(p.nonfinite for p in parts)
    mismatches = sum(p.mismatches for p in parts)
    max_abs = max([p.max_abs_diff for p in parts] + [0.0])
    check_compared("ONNX (%s flavour)" % flavour, elements, nonfinite, "the verification batch")
    fix_pos = getattr(gm, "output_fix_pos", None)
    return {
        "flavour": flavour,
        "max_abs_diff": max_abs,
        "mismatches": mismatches,
        "elements": elements,
        "nonfinite": nonfinite,
        "max_diff_lsb": None if fix_pos is None else max_abs * 2.0 ** fix_pos,
        "fraction_mismatched": mismatches / elements if elements else 0.0,
        "ort_optimizations": "all" if optimized else "none",
    }


def verify_qdq(gm: torch.fx.GraphModule, onnx_path: str, inputs: torch.Tensor) -> Dict[str, Any]:
    """Check a qdq file exactly, then measure how far it is from the DPU's numbers.

    1. With optimizations off, the file must equal :func:`qdq_reference` of ``gm`` bit for bit.
    2. With ONNX Runtime's default optimizations, the file is compared with ``gm`` itself (the
       DPU's arithmetic): that difference is returned, not bounded (see :func:`qdq_warning`).

    Args:
        gm, onnx_path, inputs: as for :func:`verify_onnx`.

    Returns:
        :func:`verify_onnx`'s report of step 2, plus ``reference_mismatches`` (0) and
        ``quantization_points`` (the number of ``fake_quant`` nodes of ``gm``).

    Raises:
        ExportError: step 1 found a difference (an exporter bug), with its statistics.
    """
    exact = verify_onnx(qdq_reference(gm), onnx_path, inputs)
    if exact["mismatches"]:
        raise ExportError(
            "the qdq file is not the half-to-even simulation it must equal bit for bit (ONNX Runtime, "
            "optimizations off): %d of %d elements differ, max abs diff %g. This is an exporter bug: "
            "report it with the model" % (exact["mismatches"], exact["elements"], exact["max_abs_diff"]))
    report = verify_onnx(gm, onnx_path, inputs, optimized=True)
    report["reference_mismatches"] = 0
    report["quantization_points"] = sum(1 for n in gm.graph.nodes
                                        if n.op == "call_function" and n.target is fixpoint.fake_quant)
    return report


def qdq_warning(report: Dict[str, Any]) -> Optional[str]:
    """The report's warning when a :func:`verify_qdq` report differs by more than 1 LSB, else None.

    Also warns when the output has no fix_pos (no LSB to count in) and any element differs.
    """
    lsb = report.get("max_diff_lsb")
    if (report["mismatches"] == 0) or (lsb is not None and lsb <= 1):
        return None
    return ("onnx_qdq differs from the simulation by up to %s at the output (%d of %d elements, %.0f%%; ONNX "
            "Runtime with its default optimizations): QuantizeLinear rounds ties half to even at each of the "
            "model's %d quantization points where the DPU rounds half_up, and the differences add up through "
            "the graph. The DPU's numbers are those of the simulation and of onnx_exact; use onnx_qdq only "
            "for tools that need QDQ" % ("%g LSB" % lsb if lsb is not None else "%g (no output fix_pos)"
                                         % report["max_abs_diff"], report["mismatches"], report["elements"],
                                         100.0 * report["fraction_mismatched"],
                                         report.get("quantization_points", 0)))


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
