"""The drop-in's ``TorchQuantizer`` (``pipeline.apis``; ``torch_quantizer`` in ``entry`` makes it): its state,
its input checks and forward hooks, ``quant_model``; ``dump_xmodel``. The calib-mode methods are in
``calib_mode``, the test-mode ones in ``exports``."""
import copy
import warnings
from typing import Any, Dict, Optional, Set, Tuple

import torch
from torch import nn

from ..errors import ExportError, QuantizationError
from ..models.loading import load_state_dict_file
from ..ops import ADAPTIVEAVGPOOL2D, LEAKY_RELU, call_arguments
from ..ops.leaky_relu import LEAKY_SLOPE
from ..quantizers import calib_commit
from ..quantizers.base import QuantSettings
from ..quantizers.calib_commit import check_committed
from ..quantizers.fingerprint import make_fingerprint
from ..quantizers.quant_config import QuantConfig, load_quant_config
from ..quantizers.sim.lowered_forward import shapes_on
from ..quantizers.sim.ops import adaptive_global
from ..quantizers.sim.session import SimSession
from .calib_mode import CalibModeMethods, CalibModel
from .checks import check_input, check_mode, check_target, cpu_device, example_inputs, output_folder
from . import options
from .exports import TestModeMethods
from .notes import log, note

# Keyword arguments of the real torch_quantizer (3.5) that the simulation accepts and ignores,
# with their defaults (docs/quantizer.md#torch_quantizer-arguments).
IGNORED_KWARGS = {"input_kwargs": None, "mix_bit": False, "lstm": False, "app_deploy": "CV",
                  "qat_proc": False, "custom_quant_ops": None, "dynamo": False}


class TorchQuantizer(CalibModeMethods, TestModeMethods):
    """The object ``torch_quantizer`` returns. See :func:`torch_quantizer`."""

    def __init__(self, quant_mode: Any, module: nn.Module, input_args: Any = None,
                 state_dict_file: Optional[str] = None, output_dir: str = "quantize_result",
                 bitwidth: Optional[int] = None, device: Any = torch.device("cuda"),
                 quant_config_file: Optional[str] = None, target: Optional[str] = None,
                 **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(IGNORED_KWARGS))
        if unknown:
            raise TypeError("torch_quantizer() got unexpected keyword arguments %s" % unknown)
        for key, value in kwargs.items():
            if value != IGNORED_KWARGS[key]:
                warnings.warn("torch_quantizer: %s=%r is ignored by the sim quantizer" % (key, value))
        if input_args is None:
            raise QuantizationError("input_args is required: an example input of the model's input shape")
        if isinstance(module, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            warnings.warn("DataParallel is not supported; its module is quantized instead")
            module = module.module
        self.quant_mode = check_mode(quant_mode)
        # calib mode writes there (export_quant_config): made now, and refused inside a run folder a run holds
        calib = self.quant_mode == "calib"
        self.output_dir = output_folder(output_dir, "torch_quantizer", create=calib, writes=calib)
        self.device = cpu_device(device)
        self.target = check_target(target, quant_config_file)
        if state_dict_file is not None:
            module = copy.deepcopy(module)
            module.load_state_dict(load_state_dict_file(state_dict_file))
        resolved = isinstance(quant_config_file, QuantConfig)  # the project's own callers (QatProcessor)
        self.config = quant_config_file if resolved else load_quant_config(quant_config_file, bitwidth)
        self.quant_off = options.nndct_quant_off.value  # --nndct_quant_off (options.py)
        if self.quant_off and quant_config_file is None:  # nndct turns CLE and bias correction off with it
            self.config = copy.copy(self.config)
            self.config.include_cle = self.config.include_bias_corr = False
        quant_config_file = None if resolved else quant_config_file
        examples = example_inputs(input_args)
        # the session's own copies (shape propagation runs the model on them): see _examples
        self._session = SimSession(module, tuple(e.clone() for e in examples), self.config, quant_off=self.quant_off)
        self._examples = examples
        self._fingerprint = self._make_fingerprint(module, examples, quant_config_file)
        self._forwards = 0
        self._first_inputs = None  # type: Optional[Tuple[torch.Tensor, ...]]  # the first test-mode forward's
        self._first_batch = None  # type: Optional[int]
        self._empty_forwards = 0  # calibration forwards on an empty batch
        self._nonzero_forwards = 0  # calibration forwards whose input is not all zeros
        self._calibrator_samples = 0  # samples over all calibration forwards
        self._own_forwards = 0  # calibration forwards of this process (under torch.distributed: this rank's)
        self._finetune = None  # type: Optional[Dict[str, Any]]  # fast_finetune's record
        self._ft_loaded = False  # load_ft_param ran
        if self.quant_mode == "calib":
            from ..distributed import dropin_comm
            # combined over the ranks when a group is up; each collective's wait is bounded (dropin_comm)
            self._calibrator = self._session.calibrator(dropin_comm())
            self._model = CalibModel(self)  # type: nn.Module
        else:
            # an interrupted or mixed calibration, or one made for another input shape, target,
            # model or quant_config_file, is refused, naming the field (as the runner does)
            redo = "run torch_quantizer('calib', ...) and export_quant_config() again"
            with calib_commit.exclusive(output_dir, shared=True):  # no export into it meanwhile
                check_committed(output_dir, require=False, redo=redo)  # not interrupted, not mixed
                # the float model's parameters until load_ft_param(), as nndct's test mode
                self._model = self._session.load_test(output_dir, finetuned=False)
                # then what it was made for: other weights warn (the real quantizer tests any weights)
                check_committed(output_dir, self._fingerprint, ignore=("config_hash",), require=False, redo=redo,
                                warn_only=("weights_hash",))
            self._model.register_forward_pre_hook(self._check_forward)
            self._model.register_forward_hook(self._count_forward)
        warn_leaky_slopes(self._session.graph)  # while nndct optimizes the graph, before its note
        note("=>Get module with quantization.")
        self._pools_warned = set()  # type: set  # the adaptive pools _warn_uneven_pools warned about

    def _warn_uneven_pools(self, inputs: Tuple[Any, ...]) -> None:
        """nndct's warning, once per node, for an adaptive average pool whose output size does not divide the
        input size a forward gives it (``deephi_AdaptiveAvgPool2d.forward``, ``adaptive_avg_pool.py``: on every
        forward, in both modes). A forward of new input sizes (other than the example's) costs one float
        forward of its first sample, to learn the sizes (``lowered_forward.shapes_on``, which the test-mode
        model's choice of graph shares); a global pool always divides and costs nothing."""
        graph = self._session.graph
        pools = [n for n in graph.nodes if n.op == ADAPTIVEAVGPOOL2D and n.name not in self._pools_warned
                 and not adaptive_global(graph, n)]
        if not pools or not all(isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] > 0 for x in inputs):
            return
        shapes = shapes_on(graph, inputs)
        for node in pools:
            out, size = ([int(d) for d in shapes[n][-2:]] for n in (node.fx_node, node.fx_node.all_input_nodes[0]))
            if any(i % o for i, o in zip(size, out)):
                self._pools_warned.add(node.name)
                log.warning("AdaptiveAvgpool2d op(%s) is not quantized: its output size %s does not divide its input "
                            "size %s, so it runs unscaled, in float, as in the real quantizer (the DPU cannot run it)",
                            graph.full_name(node), out, size)

    def _make_fingerprint(self, module: nn.Module, examples: Tuple[torch.Tensor, ...],
                          quant_config_file: Optional[str]) -> Dict[str, Any]:
        """The runner's calibration fingerprint (``pipeline.quantizers.fingerprint``) of this
        quantizer; with several inputs, ``input_shape`` and ``input_dtype`` list each input's."""
        settings = QuantSettings(target=self.target, bitwidth=self._session.bitwidth,
                                 quant_config_file=quant_config_file, device="cpu")
        # no config file: config_hash names the API (the field is informative and not compared)
        fp = make_fingerprint(module, examples[0], settings, "pipeline.apis.torch_quantizer", "sim")
        if len(examples) > 1:
            fp["input_shape"] = [[int(d) for d in e.shape[1:]] for e in examples]
            fp["input_dtype"] = [str(e.dtype) for e in examples]
        return fp

    def _collective(self, call: str, hint: str) -> None:
        """Under torch.distributed: name what the user called and what every rank must call, for the
        error of a collective a rank does not join (``distributed.dropin_comm``)."""
        comm = getattr(self._calibrator, "comm", None)
        if comm is not None:
            comm.call, comm.hint = call, hint

    def _check_inputs(self, xs: Tuple[Any, ...], what: str) -> Tuple[torch.Tensor, ...]:
        """``xs`` checked against the example inputs: as many, each float32 of the same rank."""
        if len(xs) != len(self._examples):
            raise QuantizationError("%s: the model takes %d input tensors (as input_args), got %d"
                                    % (what, len(self._examples), len(xs)))
        return tuple(check_input(x, what if len(xs) == 1 else "%s %d" % (what, i), e.dim())
                     for i, (x, e) in enumerate(zip(xs, self._examples)))

    def _check_forward(self, module: nn.Module, inputs: Any) -> None:
        if self._forwards == 0 and not self._ft_loaded and getattr(module, "quant_info", {}).get("fast_finetuned"):
            warnings.warn("quant_info.json in %s is from a fast-finetuned calibration, but load_ft_param() was not "
                          "called: this forward uses the float model's parameters, not the finetuned ones (as the "
                          "real quantizer does); call quantizer.load_ft_param() before the first forward"
                          % self.output_dir)
        if inputs:  # a keyword-only call is left to the model's forward
            self._check_inputs(tuple(inputs), "quant_model input")
            self._warn_uneven_pools(tuple(inputs))
        if self._forwards == 0 and inputs:  # the real quantizer records shapes on this forward only
            # the caller's values, kept before the forward runs (a model may write its input in place)
            self._first_inputs = tuple(x.detach()[:1].clone() if x.dim() else x.detach().clone() for x in inputs)
            self._first_batch = int(inputs[0].shape[0]) if inputs[0].dim() else 1

    def _count_forward(self, module: nn.Module, inputs: Any, output: Any) -> None:
        self._forwards += 1
        global _CURRENT
        _CURRENT = self  # dump_xmodel() exports the quantizer that ran last, as nndct's global one

    def _example1(self) -> Tuple[torch.Tensor, ...]:
        """The batch-1 example inputs (first sample of each ``input_args`` tensor), contiguous copies."""
        return tuple(e[:1].clone().contiguous() for e in self._examples)

    def _check_exportable(self, method: str, output_dir: Any) -> None:
        output_folder(output_dir, method, error=ExportError)  # a folder path, outside a run folder a run holds
        if self.quant_mode != "test":
            raise QuantizationError(
                "%s needs test mode: this quantizer was created in calib mode. Call "
                "export_quant_config() here, then create torch_quantizer('test', ...) and run a "
                "forward of its quant_model before exporting" % method)
        if self._forwards == 0:
            raise QuantizationError(
                "%s: run at least one forward of quant_model in test mode before exporting (the "
                "real quantizer logs 'FORWARD function must be called' and writes nothing)" % method)

    @property
    def quant_model(self) -> nn.Module:
        """The quantized model to run forwards on.

        calib: each forward calibrates on the batch (one float32 tensor per input, not modified) and returns the
        calibration output; a batch holding NaN/Inf warns (forward index and count) and is
        skipped by the statistics, as in nndct. test: the lowered ``torch.fx.GraphModule`` (``sim/lowered.py``).
        Either raises QuantizationError on inputs that are not float32 torch.Tensors of the
        example inputs' number and ranks.
        """
        return self._model


def leaky_slope(graph: Any, node: Any) -> float:
    """The float model's slope of a LeakyReLU node of ``graph`` (a ``SimGraph``): its module's
    ``negative_slope``, or ``F.leaky_relu``'s argument (by its record's signature: torch's default 0.01)."""
    fx_node = node.fx_node
    if fx_node.op == "call_module":
        return float(graph.module(node).negative_slope)
    return float(call_arguments(LEAKY_RELU, fx_node.args, fx_node.kwargs)["negative_slope"])


def warn_leaky_slopes(graph: Any) -> None:
    """Warn, as nndct's ``SetNegativeSlope`` (``nndct_shared/optimization/commander.py``) does with its own
    words, once per process and message (``warning2user_once``): a LeakyReLU whose slope is not 26/256 runs with
    26/256 in the quantized model (docs/arithmetic.md#leakyrelu-slope); under quantization off (and outside the
    quantized parts) its slope is kept."""
    for node in graph.nodes:
        if node.op != LEAKY_RELU:
            continue
        slope = leaky_slope(graph, node)
        if graph.runs_float(node):
            message = "Preserve negative_slope(%s) of LeakyReLU without quantization." % slope
        elif slope != LEAKY_SLOPE:
            message = ("Force to change negative_slope of LeakyReLU from %s to 0.1015625 because DPU only supports "
                       "this value. It is recommended to change all negative_slope of LeakyReLU to 0.1015625 and "
                       "re-train the float model for better deployed model accuracy." % slope)
        else:
            continue
        if message not in _WARNED:
            _WARNED.add(message)
            log.warning(message)


_WARNED = set()  # type: Set[str]  # the LeakyReLU messages given in this process (nndct's warning2user_once)


def dump_xmodel(output_dir: str = "quantize_result", deploy_check: bool = False, app_deploy: str = "CV") -> str:
    """``pytorch_nndct.apis.dump_xmodel``: the xmodel of the quantizer that ran a test-mode forward last
    (the real one uses its process-global quantizer); see :meth:`TorchQuantizer.export_xmodel`.

    Raises:
        QuantizationError: no test-mode quantizer has run a forward in this process.
        ExportError: as ``export_xmodel``.
    """
    if _CURRENT is None:
        raise QuantizationError("dump_xmodel: no quantizer has run a forward of its quant_model in test mode in "
                                "this process; create torch_quantizer('test', ...) and run quant_model(x[:1]) first")
    return _CURRENT.export_xmodel(output_dir, deploy_check)


_CURRENT = None  # type: Optional[TorchQuantizer]
