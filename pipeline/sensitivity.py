"""The per-layer sensitivity the test step reports, for either backend's calibration: each quantized point
of the simulation's test-mode model against the float model (``quantizers.sim.sensitivity``).

It runs on the simulation whichever backend calibrated: the simulation reads the real quantizer's
``quant_info.json`` and ``bias_corr.pth`` and is bit-exact with it (tests/sim/test_sim_golden.py). A
backend whose test handle is the simulation's test-mode model (``QuantizerBackend.simulates``) hands that
handle over; for any other, the model is built here from the calibration files with the simulation's
library (``quantizers.sim.session.load_test_model``), never through a backend class. The steps call this
module and name no backend.
"""
import logging
from typing import Any, Dict, Iterable, List, Optional

from .quantizers.sensitivity_rows import LayerSensitivity


def simulated_model(test_handle: Any, simulates: bool, model: Any, example: Any, calib_dir: str, settings: Any,
                    traced: Any = None) -> Optional[Any]:
    """The simulation's test-mode model (a ``torch.fx.GraphModule``, ``quantizers/sim/lowered.py``) of the
    calibration in ``calib_dir``, which the per-layer sensitivity runs on: ``test_handle`` itself when
    ``simulates`` (the backend's test handle is one, made from the same files and ``settings``), else
    built from the files. None when the simulation has no form for a call of the model
    (``pipeline.fx.refusals.NotSimulated``, a Conv1d say): the backend quantized it, and only this
    analysis is left out (logged).

    Args:
        test_handle: the backend's ``load_test`` handle of ``model`` and ``calib_dir``.
        simulates: the backend's ``simulates`` declaration.
        model, example, settings, traced: as the backend's ``load_test`` took them (float model,
            float32 NCHW example, ``QuantSettings``, the step's ``FloatTrace`` or None).
        calib_dir: the folder of ``quant_info.json`` (and ``bias_corr.pth``, ``param.pth``).

    Raises:
        QuantizationError: as ``load_test`` does (files missing or made for another model).
    """
    if simulates:
        return test_handle
    from .fx.refusals import NotSimulated
    from .quantizers.sim.session import load_test_model
    try:
        return load_test_model(model, example, calib_dir, settings, traced)
    except NotSimulated as e:
        logging.getLogger("pipeline").warning("test: per-layer sensitivity left out: it runs on the simulation, "
                                              "and %s" % e)
        return None


def layer_sensitivity(model: Any, handle: Optional[Any], quant_info: Dict[str, Any], batches: Iterable[Any],
                      settings: Any, comm: Any = None, example: Any = None,
                      traced: Any = None) -> List[LayerSensitivity]:
    """The per-layer SQNR, cosine and value ranges of ``handle`` (``simulated_model``'s) against the float
    ``model`` on ``batches`` (float32 NCHW, consumed once, not modified), one ``LayerSensitivity`` per
    quantized point in graph order: ``layer_sensitivity`` of ``quantizers/sim/sensitivity.py``, whose
    arguments these are (its docstring: the rows, the errors). No rows without a handle."""
    if handle is None:
        return []
    from .quantizers.sim.sensitivity import layer_sensitivity as measure
    return measure(model, handle, quant_info, batches, settings, comm=comm, example=example, traced=traced)
