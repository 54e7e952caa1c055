"""Drop-in for ``pytorch_nndct.apis`` backed by the CPU simulation (``sim`` backend):
``torch_quantizer``, ``dump_xmodel``, ``Inspector`` and ``QatProcessor`` (quantization-aware training, ``qat``).

Scripts written for ``pytorch_nndct.apis.torch_quantizer`` (Vitis AI 3.5; docs/quantizer.md#torch_quantizer-arguments, docs/quantizer.md#methods-and-exports) run
unchanged with ``from pipeline.apis import torch_quantizer``::

    q = torch_quantizer("calib", model, (x,), output_dir="quantize_result")
    for batch in calib_batches:
        q.quant_model(batch)
    q.export_quant_config()            # quant_info.json (+ bias_corr.pth)

    q = torch_quantizer("test", model, (x,), output_dir="quantize_result")
    out = q.quant_model(eval_batch)     # bit-identical to the real quantizer's test mode
    q.export_onnx_model()               # <Model>_int.onnx
    q.export_torch_script()             # <Model>_int.pt, bit-identical to quant_model

What behaves like the real quantizer: the quant_mode rules (anything but 'calib'/'test' warns
and calibrates), the files and their format, the fix positions and test-mode numbers (two-process
result, whatever the process layout), ``export_quant_config`` without a forward only logs an
error, CUDA falls back to the CPU with the real warning.

What differs, on purpose:

- The caller's input tensors and model are NEVER changed: the real quantizer rounds its input in
  place and swaps ReLU6 for ReLU inside the caller's model (docs/quantizer.md#input-rounded-in-place, docs/quantizer.md#the-callers-model-is-rewritten); here the model is
  copied (its weights shared, never written: ``pipeline.fx.work_copy``), and an input the model writes
  itself (``x.sub_(0.5)`` in its forward) is copied before the simulation runs (``SimGraph.own_inputs``).
- A calibration batch holding NaN/Inf warns with the forward index and the count; nndct skips
  it silently, and the statistics here skip it the same way.
- ``export_quant_config`` also writes ``calib_fingerprint.json`` and commits the files as one unit
  (``calib_manifest.json``, ``pipeline.quantizers.calib_commit``); test mode refuses an
  interrupted or mixed calibration and one made for another input shape, target, model or
  quant_config_file, naming the field, as the pipeline's test step does; other weights warn. A folder written by the
  real quantizer (no manifest) is used as it is.
- Errors raise instead of ending the process: a missing ``quant_info.json`` or
  ``bias_corr.pth`` in test mode is a ``QuantizationError`` (nndct calls ``exit(2)``), a bad
  ``quant_config_file`` a ``ConfigError``.
- The simulation always runs on the CPU.
- Under ``torch.distributed`` (the script has called ``init_process_group``), calib-mode forwards
  on several ranks combine into one calibration, bit-identical to one process that runs rank
  ``r``'s ``k``-th batch as batch ``k * world + r`` (shard the batches round-robin:
  ``batches[rank::world]``); every forward and ``export_quant_config`` are collectives (every rank
  calls them; ranks may run different numbers of forwards), and ``export_quant_config`` writes on
  rank 0 only (the other ranks return the path once it is written). Each collective waits at most
  ``PIPELINE_COLLECTIVE_TIMEOUT_S`` seconds (default 300) for every rank, then raises a
  ``DistributedError`` naming the missing rank and what every rank must call (a script with
  ``if rank == 0: quantizer.export_quant_config()`` fails there instead of waiting for gloo's 30
  minutes). The real quantizer has nothing like it.
- ``target`` is checked against the DPU target registry (an unknown name is a ``ConfigError``,
  nndct exits), then only recorded, with a warning: no hardware-aware quantization here.
- ``fast_finetune``/``load_ft_param`` run the real quantizer's AdaQuant on the simulation (docs/finetune.md):
  the same ``param.pth`` and files; the kept batches spill to temporary files beyond 512 MiB instead
  of filling memory; bad input (test mode, one batch, other shapes, ``load_ft_param`` without a
  finetuned calibration) raises instead of exiting. ``Inspector`` runs the CPU inspection of
  ``pipeline.inspect``.
- ``export_xmodel``/``dump_xmodel`` write ``<Model>_int.xmodel`` without pytorch_nndct or ``xir``
  (``pipeline.quantizers.sim.xmodel``): the file the real quantizer writes, checked and run against
  the simulation before it is written. The real quantizer records shapes on the FIRST test-mode
  forward and, when that was not batch 1, logs "Batch size must be 1" and writes a wrong-batch
  file; here that raises and nothing is written. Calib mode and no forward raise too (the real
  one logs them).
- ``export_torch_script`` traces the lowered test-mode model (plain aten operators, no
  ``torch.ops.vai``), so the file loads with ``torch.jit.load`` alone.
- ``export_onnx_model`` and ``export_torch_script`` raise instead of logging when called in calib
  mode or before a forward.
- Calibration data that cannot calibrate warns (a single sample, fewer than 100 samples, inputs that
  are all zeros, an empty batch); all-empty calibration raises before anything is written.
- ``output_dir`` is checked when the quantizer is made (a file in its place, or a folder that cannot
  be made, is a ``StorageError``; the real one fails later, in ``os.makedirs``), and no call writes
  into a run folder that a pipeline run holds now (its lock, ``pipeline.runlock``): calib mode's
  construction, ``fast_finetune``, ``export_quant_config`` (again right before it writes), the exports
  and ``Inspector.inspect`` raise a ``RunFolderError`` naming the run folder and the run's pid, and
  write nothing. Reading a run's calibration in test mode is allowed.
- The notes (``=>Exporting quant config.(...)``, each export's file, fast finetune's phases and a
  line per finetuned layer) are shown by default on stderr as ``[VAIQ_NOTE]: ...`` lines, as the real
  quantizer prints them (``notes``); ``logging.getLogger("pipeline.apis").setLevel(logging.WARNING)``
  silences them.

Modules: ``entry`` (``torch_quantizer``), ``quantizer`` (``TorchQuantizer``, ``dump_xmodel``), ``qat``
(``QatProcessor``, ``QatQuantizer``: quantization-aware training, docs/qat.md), ``calib_mode``
(calibration forwards, ``export_quant_config``, ``fast_finetune``), ``exports`` (test-mode
``load_ft_param`` and the exports), ``checks`` (argument checks, ``output_dir``), ``inspector``
(``Inspector``), ``notes`` (the ``[VAIQ_NOTE]`` lines), ``options`` (``--nndct_quant_off``, read from
``sys.argv`` when this package is imported, as ``pytorch_nndct`` reads it; ``set_option_value``).
"""
from . import notes, options  # noqa: F401 (options: --nndct_quant_off read from sys.argv now)
from .entry import torch_quantizer
from .inspector import Inspector
from .qat import QatProcessor, QatQuantizer
from .quantizer import TorchQuantizer, dump_xmodel

notes.install()  # the notes are shown by default, as the real quantizer's [VAIQ_NOTE] lines

__all__ = ["torch_quantizer", "TorchQuantizer", "Inspector", "dump_xmodel", "QatProcessor", "QatQuantizer"]
