"""The simulation's quantized model as an XIR ``.xmodel``, the file ``vai_c_xir`` compiles.

The real quantizer's ``export_xmodel()`` needs pytorch_nndct and libxir, found only in the Vitis AI
image. This package writes the same file from the simulation, with the ``protobuf`` package alone
(docs/xmodel.md): the same ops in the same order with the same names, attributes, constants and
fix positions as the real quantizer writes for the same model and calibration (the golden files in
tests/data/golden_xmodel are reproduced as parsed messages).

The format itself (the serialized graph, the op definitions and shape inference, the graph as libxir
builds one, the reader and the interpreter) is ``pipeline.xir``; this package is nndct's side of it:

- ``names``: the real quantizer's node names, from a ``torch.jit`` trace as nndct makes it;
- ``lower``/``devgraph``/``deploy``/``layout``: nndct's deploy graph and its rewrites (NHWC,
  transposes, pad folding, reshapes); ``convert``: the ops nndct creates per node;
- ``writer``: the whole export; ``verify``: a file (``xir.reader``, run by ``xir.interp``) against
  the simulation; ``deploy_check``: the real quantizer's deploy-check dumps.

:func:`write_xmodel` writes a file and proves it: read back, checked, and run by the interpreter
on the batch-1 example against the simulation, bit for bit.
"""
import os
import warnings
from typing import Any, Dict, List, Sequence

import torch

from ....errors import ExportError
from ....fileio import write_bytes, write_files
from .writer import build

SUFFIX = "_int.xmodel"
FLOAT_SUFFIX = "_float.xmodel"  # under quant_off (``SimGraph.quant_off``; ``xir_compiler.do_compile``)


def write_xmodel(session: Any, lowered: torch.fx.GraphModule, examples: Sequence[torch.Tensor],
                 out_dir: str, warn: bool = True, deploy_check: bool = False) -> Dict[str, Any]:
    """Write ``<out_dir>/<Model>_int.xmodel`` for the sim's test-mode model, verified.

    Args:
        session: the ``SimSession`` that built ``lowered``.
        lowered: the sim's test-mode model (quantized parameters, ``quant_info``).
        examples: one batch-1 float32 tensor per model input, as the first test-mode forward had them.
        out_dir: the folder (created).
        warn: warn (``UserWarning``) when output elements were left uncompared; False where the
            caller reports them itself (the backend's ``verify``: ``finite.note``).
        deploy_check: also write the real quantizer's deploy-check dumps under
            ``<out_dir>/deploy_check_data_int/<Model>/`` (``deploy_check.dump_files``), computed before
            anything is written and written with the xmodel in one ``write_files`` call.

    Returns:
        ``{"path", "bytes", "ops", "op_types", "fix_ops", "inputs", "outputs", "check": "ok",
        "interpreter": {...}}`` (and ``"deploy_check": [paths]`` with ``deploy_check``); the interpreter
        report (``verify.compare``) gives the output elements compared and how many differ (0), those not compared (``nonfinite``: NaN or inf alike in the
        file and the simulation, ``pipeline.quantizers.sim.finite``), and the intermediate ops compared
        with their simulation node.

    Raises:
        lower.XmodelUnsupported: a node the xmodel cannot carry (named); nothing is written.
        ExportError: an op breaks XIR's definitions, the model's outputs are not a tensor or a flat
            tuple/list of tensors, the file does not pass its own check, or running it differs from the simulation
            (an output or an intermediate op); the example holds NaN or inf, or every output element is NaN
            or inf (a check of nothing finite); nothing is written under the final name.
    """
    from ..finite import check_inputs, note
    from ..lowered_forward import for_inputs
    from ....xir import reader
    from ....xir.errors import XGraphError
    from . import verify
    # the file is proved on the example: a NaN there proves nothing (finite.py), refused before any work
    check_inputs(examples, "xmodel", "give a finite batch-1 example (with the drop-in API: the first test-mode "
                 "forward, quant_model(x[:1]) on a real sample, in a new test-mode quantizer); nothing was written")
    if deploy_check and session.graph.quant_off:
        raise ExportError("xmodel: the deploy-check dumps of the quantization-off flow (the real quantizer's "
                          "deploy_check_data_float) are not written yet; export without deploy_check")
    lowered = for_inputs(lowered, examples)  # the graph for the sizes its adaptive pools see on them
    try:
        graphs, names = build(session, lowered, examples)
    except XGraphError as e:
        raise ExportError("xmodel: an op the writer built breaks XIR's op definitions (%s): a case the writer does "
                          "not cover; nothing was written. The ONNX exports do not depend on it: drop xmodel from "
                          "export.formats to go on, and report the model" % e) from None
    files = []  # type: List[Any]
    for graph in graphs:  # one per quantized part (QuantStub), each proved before anything is written
        data = graph.serialize()
        message = reader.read_xmodel(data)
        checked = reader.check(message)
        report = reader.describe(message)
        compared = verify.compare(checked, session, lowered, examples, names)
        if compared["mismatches"] or compared["nodes_differing"]:
            ops = ["%s (%s)" % (name, checked.get_op(name).type) for name in compared["nodes_differing"][:5]]
            raise ExportError("xmodel: running the written graph differs from the simulation: %d of %d output "
                              "elements (max abs diff %g), first ops that differ: %s; nothing was written. This is "
                              "a case the writer gets wrong; the ONNX exports do not depend on it: drop xmodel from "
                              "export.formats to go on, and report the model"
                              % (compared["mismatches"], compared["elements"], compared["max_abs_diff"],
                                 ", ".join(ops) or "none (only the outputs)"))
        # quant_off: no quant info, so nndct's do_compile names the file _float; a part: <Class>_<n>
        path = os.path.join(out_dir, graph.name + (FLOAT_SUFFIX if session.graph.quant_off else SUFFIX))
        files.append((path, data, report, compared))
    path, data, report, compared = files[0]
    dumps = []  # type: list
    if deploy_check:
        if len(files) > 1:
            raise ExportError("xmodel: the deploy-check dumps of a model with several quantized parts (QuantStub) "
                              "are not written yet; export without deploy_check")
        from .deploy_check import dump_files
        dumps = [(os.path.join(out_dir, *rel.split("/")), blob)
                 for rel, blob in dump_files(session, lowered, examples)]
    # the dumps first (nndct writes them before the xmodel), the xmodel last: its name appears only
    # once everything else is in place
    if dumps:
        _write_all(dumps + [(path, data)])
    elif len(files) > 1:
        _write_all([(p, d) for p, d, _, _ in files])
    else:
        write_bytes(path, data)
    if len(files) > 1:  # the first part's report, the others' paths
        report = dict(report, parts=[p for p, _, _, _ in files])
    skipped = note("xmodel", compared)
    if skipped and warn:
        warnings.warn(skipped)
    report.update(path=path, bytes=len(data), check="ok", interpreter=compared)
    if deploy_check:
        report["deploy_check"] = [p for p, _ in dumps]
    return report


def _write_all(items: List[Any]) -> None:
    """``write_files``, and on failure the folders it created (left empty) removed too: nothing of the
    export remains."""
    created = []  # type: List[str]
    for folder in sorted({os.path.dirname(os.path.abspath(p)) for p, _ in items}, key=len):
        walk = folder
        missing = []
        while walk and not os.path.exists(walk):
            missing.append(walk)
            walk = os.path.dirname(walk)
        created.extend(f for f in missing if f not in created)
    try:
        write_files(items)
    except BaseException:
        for folder in sorted(created, key=len, reverse=True):
            try:
                os.rmdir(folder)
            except OSError:
                pass
        raise
