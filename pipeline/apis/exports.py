"""Test mode of the drop-in ``torch_quantizer`` (``pipeline.apis``): ``load_ft_param`` and the
exports of the test-mode model (``export_onnx_model``, ``export_xmodel``, ``export_torch_script``),
as ``TestModeMethods``, a part of ``TorchQuantizer``."""
import copy
import io
import os
import warnings
from typing import Any, Optional

import torch

from ..errors import ExportError, QuantizationError
from ..fileio import write_bytes
from ..quantizers.quant_info import QUANT_INFO_FILE
from ..quantizers.sim.finite import check_inputs
from ..quantizers.sim.lowered import OwnInputs
from .notes import note


class TestModeMethods:
    """The test-mode methods of :class:`pipeline.apis.quantizer.TorchQuantizer` (a part of that class;
    its ``__init__`` sets the state they use, and it gives ``_check_exportable`` and ``_example1``)."""

    def load_ft_param(self) -> None:
        """Test mode: use the fast-finetuned parameters (``param.pth``) of the calibration in
        ``output_dir``, as nndct's ``load_ft_param``. Call it before the first forward (the real
        quantizer applies the bias correction and rounding on that forward; here the model is
        rebuilt either way, and a warning says the real one would not).

        Raises:
            QuantizationError: calib mode, a ``quant_info.json`` without ``"fast_finetuned": true``
                (nndct logs an error and exits), or a ``param.pth`` that is missing or made for another
                model.
        """
        from ..quantizers.quant_info import read_quant_info
        if self.quant_mode != "test":
            raise QuantizationError("load_ft_param is for test mode (the real quantizer exits with an error in "
                                    "calib mode): create torch_quantizer('test', ...) and call it there")
        info = read_quant_info(self.output_dir)
        if info.get("fast_finetuned") is not True:
            raise QuantizationError(
                "load_ft_param: %s/%s is not from a fast-finetuned calibration (\"fast_finetuned\": false); call "
                "quantizer.fast_finetune(...) in calib mode before export_quant_config(), or leave load_ft_param out"
                % (self.output_dir, QUANT_INFO_FILE))
        if self._forwards:
            warnings.warn("load_ft_param after %d test-mode forwards: the real quantizer needs it before the first "
                          "forward (its first forward applies bias correction and rounding to the parameters it "
                          "has then); the simulation uses the finetuned parameters from here on" % self._forwards)
        fresh = self._session.load_test(self.output_dir, finetuned=True)
        for name, module in fresh.named_children():
            if hasattr(module, "weight_fix_pos"):
                target = self._model.get_submodule(name)
                target.weight, target.bias = module.weight, module.bias
        self._model.fast_finetuned = True
        self._ft_loaded = True

    def export_onnx_model(self, output_dir: str = "quantize_result", verbose: bool = False,
                          dynamic_batch: bool = False, opset_version: Optional[int] = None,
                          native_onnx: bool = True, dump_layers: bool = False,
                          check_model: bool = False, opt_graph: bool = False) -> Optional[str]:
        """Test mode: write ``<output_dir>/<Model>_int.onnx`` (docs/quantizer.md#methods-and-exports).

        ``native_onnx=True`` gives QuantizeLinear/DequantizeLinear (``qdq`` flavour, half-even on
        ties); ``False`` gives the bit-exact ``exact`` flavour (nndct writes ``vai::`` custom ops
        there). The batch dimension is always dynamic; ``verbose``, ``dump_layers``,
        ``check_model`` and ``opt_graph`` are accepted and ignored, ``opset_version`` must be None
        or 13.

        Returns the file path.

        Raises:
            QuantizationError: calib mode, or no test-mode forward yet (the real quantizer only logs
                these and returns None; here they raise, like the other exports).
            ExportError: the exporter cannot write the model (see ``pipeline.quantizers.sim.export``).
        """
        self._check_exportable("export_onnx_model", output_dir)
        if opset_version not in (None, 13):
            raise QuantizationError("export_onnx_model: the exporter writes opset 13, got opset_version=%r"
                                    % opset_version)
        from ..quantizers.sim.export import export_onnx
        path = os.path.join(output_dir, "%s_int.onnx" % self._session.graph.class_name)
        example1 = self._example1()
        written = export_onnx(self._model, example1[0] if len(example1) == 1 else example1, path,
                              "qdq" if native_onnx else "exact")
        note("=>Exporting quant model to ONNX.(%s)", written)
        return written

    def export_xmodel(self, output_dir: str = "quantize_result", deploy_check: bool = False,
                      dynamic_batch: bool = False) -> str:
        """Test mode: write ``<output_dir>/<Model>_int.xmodel``, the file ``vai_c_xir`` compiles.

        The real quantizer's file for the same model and calibration (``pipeline.quantizers.sim.xmodel``,
        docs/xmodel.md): the shapes are those of the FIRST test-mode forward, which must be batch 1
        (``qproc/base.py`` ``dump_xmodel``; later forwards do not matter). The file is read back,
        checked and run by the interpreter against this simulation on that batch-1 input before
        it is written (atomically). ``deploy_check=True`` also writes the real quantizer's per-layer
        check data, ``<output_dir>/deploy_check_data_int/<Model>/`` (float32 ``<tensor>.bin``, int8
        codes ``<tensor>_fix.bin``, ``shape.txt``; docs/xmodel.md#deploy-check-dumps), the same files
        with the same bytes, together with the xmodel: all of them or none. ``dynamic_batch`` is
        ignored, as the real quantizer ignores it for xmodels.

        Returns:
            The file's path (the real quantizer returns None).

        Raises:
            QuantizationError: calib mode, or no test-mode forward yet (the real quantizer only logs
                these and writes nothing).
            ExportError: ``output_dir`` is not a path; the first test-mode forward was not batch 1 (the
                real one would log "Batch size must be 1" and write a batch-N file; nothing is written
                here) or passed its inputs by keyword; a node the xmodel cannot carry (named), or a
                file that fails its own check.
            StorageError: ``output_dir`` (or a folder above it) is a file, or cannot take the file.
        """
        self._check_exportable("export_xmodel", output_dir)
        if self._first_inputs is None:
            raise ExportError(
                "export_xmodel: the first forward of quant_model in test mode passed its inputs by keyword, so "
                "their shapes were not recorded; create the test-mode quantizer again and run "
                "quant_model(x[:1]) (inputs by position) as its first forward; nothing was written")
        if self._first_batch != 1:
            raise ExportError(
                "export_xmodel: the first forward of quant_model in test mode had batch size %d; the real "
                "quantizer records the xmodel's shapes on that first forward and would write a batch-%d file "
                "(it logs 'Batch size must be 1 when exporting xmodel.'). Create the test-mode quantizer again "
                "and run quant_model(x[:1]) as its first forward, then evaluate; nothing was written"
                % (self._first_batch, self._first_batch))
        from ..quantizers.sim.xmodel import write_xmodel
        report = write_xmodel(self._session, self._model, self._first_inputs, output_dir,
                              deploy_check=bool(deploy_check))
        if deploy_check:
            note("=>Finish dumping data.(%s)", os.path.dirname(report["deploy_check"][-1]))
        for path in report.get("parts", [report["path"]]):  # one file per quantized part (QuantStub)
            note("=>Successfully convert '%s' to xmodel.(%s)", os.path.basename(path).rsplit("_", 1)[0], path)
        return report["path"]

    def export_torch_script(self, output_dir: str = "quantize_result",
                            verbose: bool = False) -> torch.jit.ScriptModule:
        """Test mode: write ``<output_dir>/<Model>_int.pt``, a TorchScript of the test-mode model.

        The lowered model (``sim/lowered.py``) is traced with ``torch.jit.trace`` in eval mode
        on the batch-1 example (the first sample of ``input_args``), as the real
        ``export_traced_torch_script`` traces its quantized module (docs/quantizer.md#methods-and-exports). The trace holds
        only aten operators (``fake_quant`` becomes mul/sub/add/floor/clamp/mul), so
        ``torch.jit.load`` needs neither this package nor pytorch_nndct, and its outputs are
        bit-identical to ``quant_model``'s for any batch size (checked on the example before
        writing). The file is written atomically. ``verbose`` prints the inlined graph.

        Returns:
            The traced ``torch.jit.ScriptModule`` (float32 NCHW in, the model's outputs out).

        Raises:
            QuantizationError: calib mode, or no test-mode forward yet (the real quantizer only
                logs these and returns None).
            ExportError: the example input holds NaN or inf (nothing compared would be finite), or
                the trace does not reproduce the simulation on the example.
        """
        self._check_exportable("export_torch_script", output_dir)
        gm = self._model
        # a hook-free GraphModule on the same submodules (a copy of the graph): the forward
        # counter stays the user's
        plain = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph), class_name=gm.__class__.__name__).eval()
        example1 = self._example1()
        # a check on NaN would pass NaN against NaN (pipeline.quantizers.sim.finite, rule 1)
        check_inputs(example1, "export_torch_script", "give torch_quantizer a finite example input; nothing was written")
        written = getattr(gm, "written_inputs", ())
        if written:  # the inputs its graph writes in place: copied first, in the traced file too (lowered.py, point 1)
            plain.register_forward_pre_hook(OwnInputs(written))
        with torch.no_grad(), warnings.catch_warnings():
            # torch 2.x calls TorchScript deprecated; it is the format the real quantizer writes
            warnings.filterwarnings("ignore", message=r".*torch\.jit", category=DeprecationWarning)
            try:
                script = torch.jit.trace(plain, example1, check_trace=False)
            except Exception as e:  # the tracer raises RuntimeError, TypeError, ...
                raise ExportError("export_torch_script: torch.jit.trace failed on the test-mode "
                                  "model: %s; nothing was written" % e) from e
            expect, got = plain(*example1), script(*example1)
            buf = io.BytesIO()
            torch.jit.save(script, buf)
        if not bit_equal(expect, got):
            raise ExportError("export_torch_script: the traced model does not reproduce the "
                              "simulation on the example input; nothing was written")
        if verbose:
            print(script.inlined_graph)
        path = os.path.join(output_dir, "%s_int.pt" % self._session.graph.class_name)
        write_bytes(path, buf.getvalue())
        note("=>Exporting torch script model.(%s)", path)
        return script



def bit_equal(a: Any, b: Any) -> bool:
    """True when two outputs (tensors, or tuples/lists of them) hold the same float32 bits."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
            a.contiguous().view(torch.int32) if a.dtype == torch.float32 else a,
            b.contiguous().view(torch.int32) if b.dtype == torch.float32 else b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(bit_equal(x, y) for x, y in zip(a, b))
    return a == b

