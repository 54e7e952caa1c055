"""The QAT trainable model: the test-mode graph of PTQ with a learnable quantizer at each of its
quantization points (docs/qat.md#the-trainable-model).

It is built from the same capture, quantization plan and lowering as the PTQ test-mode model
(``sim/lowered.py``), with CLE and bias correction off as the real ``QatProcessor`` sets them:

- every ``fake_quant`` of a node's output (the input included) becomes a ``TQTQuantizer``
  (``output_quantizers.<nndct node name>``);
- every conv/linear becomes a ``QatLayer`` holding the float weights and, for a conv the deploy
  folds a BatchNorm2d into, that BatchNorm (``layers.<nndct node name>``);
- everything else (the DPU average-pool factor, LeakyReLU 26/256, hard-sigmoid, the graph) is the
  test-mode model's own, so QAT trains through the forms the simulation deploys; an adaptive pool
  takes its factor on every forward from the input it sees (``SimForm.train``, docs/qat.md).

Two behaviours:

- ``exact_deploy=False`` (the real quantizer's): every quantizer trains at the fix position its own
  threshold gives; ``to_deployable`` then moves some positions (the DPU constraint pass,
  ``plan.adjust_fix_pos``) and folds BN its own way, so the deployed model is not the trained one.
  Quantizers of a module called several times are shared (with ``allow_reused_module``).
- ``exact_deploy=True``: before every forward the constraint pass runs on the current positions and
  each quantizer uses the position that will ship; the eval-mode conv+BN uses the deploy fold's
  values; every call of a reused module has its own quantizers, as it deploys. The eval-mode
  outputs then equal the deployed model's bit for bit.
"""
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
import torch.fx
from torch import nn

from ....errors import QuantizationError
from .... import fixpoint
from .... import ops as g
from ...quant_info import make_quant_info, read_quant_info
from ..lowered import build_lowered
from ..plan import adjust_fix_pos
from ..session import SimSession
from .layers import QatLayer
from .tqt import INPUT, OUTPUT, TQTQuantizer


class Shared:
    """Read-only facts of the build shared by copies of the model (never deep-copied)."""

    def __init__(self, session: SimSession, layer_paths: Dict[str, Tuple[str, Optional[str]]]) -> None:
        self.session = session
        self.layer_paths = layer_paths  # nndct node -> (float module path, folded BN path or None)

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Shared":
        return self


class QatModel(nn.Module):
    """The trainable model ``QatProcessor.trainable_model`` returns (module docstring).

    Forward: the float model's inputs and outputs (float32, same shapes). In training mode the
    conv+BN layers use batch statistics until ``freeze_bn_stats()``.

    The real quantizer's helpers are methods here: ``enable_quant``, ``disable_quant``,
    ``enable_warmup``, ``disable_warmup``, ``freeze_quant``, ``freeze_bn_stats``, ``fuse_conv_bn``,
    ``quantizer_parameters``, ``non_quantizer_parameters``.

    Attributes:
        net: the ``torch.fx.GraphModule``; ``net.layers`` and ``net.output_quantizers`` hold the
            layers and quantizers.
        exact_deploy: the mode (module docstring).
        conv_bn_fused: True after ``fuse_conv_bn()``.
    """

    def __init__(self, net: torch.fx.GraphModule, shared: Shared, exact_deploy: bool) -> None:
        super().__init__()
        self.net = net
        self._shared = shared
        self.exact_deploy = exact_deploy
        self.conv_bn_fused = False

    # ---- the forward -------------------------------------------------------------------------
    def forward(self, *args: Any) -> Any:
        if self.exact_deploy:
            if any(q.warmup_enabled[0] == 1 and q.quant_enabled[0] == 1 for _, _, q in self.quantizers()):
                self._warm_up(*args)
            self.ship_fix_positions()
        return self.net(*args)

    def _warm_up(self, *args: Any) -> None:
        """One pass that sets every threshold from ``args`` as the first training forward would,
        leaving the BN running statistics where they are."""
        layers = list(self.layers().values())
        for layer in layers:
            layer.no_stat_update = True
        try:
            with torch.no_grad():
                self.net(*args)
        finally:
            for layer in layers:
                layer.no_stat_update = False

    # ---- quantizers and fix positions --------------------------------------------------------
    def layers(self) -> Dict[str, QatLayer]:
        """nndct node name -> its QatLayer."""
        # _modules, not ModuleDict.items(): torch 1.13's GraphModule deepcopy and pickle rebuild ``layers``
        # as a plain Module holding the same children (and named_children() would skip a shared quantizer)
        return dict(self.net.layers._modules)

    def quantizers(self) -> Iterator[Tuple[str, str, TQTQuantizer]]:
        """``(quant_info group, key, quantizer)`` for every quantized tensor, in quant_info order
        (``"param"`` keys are nndct parameter names, ``"output"`` keys ``<Class>::<node>``)."""
        session = self._shared.session
        prefix = session.graph.class_name + "::"
        by_param = {}  # type: Dict[str, TQTQuantizer]
        quantizers = dict(self.net.output_quantizers._modules)
        for name, layer in self.layers().items():
            names = session.graph.by_name[name].param_names
            by_param[names["weights"]] = layer.weight_quantizer
            if layer.bias_quantizer is not None and "bias" in names:
                by_param[names["bias"]] = layer.bias_quantizer
        for key in session.plan.param_order:
            if key in by_param:
                yield "param", key, by_param[key]
        for name in session.plan.output_order:
            if name in quantizers:
                yield "output", prefix + name, quantizers[name]

    def fix_positions(self, adjusted: bool) -> Tuple[Dict[str, Optional[int]], Dict[str, Optional[int]]]:
        """The quant_info fix positions of the current thresholds: ``(param, output)`` maps over
        every quant_info key (None where the real quantizer registers a tensor it never
        quantizes). ``adjusted``: after the DPU constraint pass (``quant_info.json``), else raw
        (``test/quant_info.json``)."""
        session = self._shared.session
        prefix = session.graph.class_name + "::"
        param = {k: None for k in session.plan.param_order}  # type: Dict[str, Optional[int]]
        output = {prefix + k: None for k in session.plan.output_order}  # type: Dict[str, Optional[int]]
        for group, key, q in self.quantizers():
            (param if group == "param" else output)[key] = q.own_fix_pos()
        if adjusted:
            out = {k[len(prefix):]: v for k, v in output.items()}
            adjust_fix_pos(session.plan, param, out, session.cfg.change_concat_input_fix,
                           session.cfg.change_pool_input_fix)
            output = {prefix + k: v for k, v in out.items()}
        return param, output

    def ship_fix_positions(self) -> None:
        """Set every quantizer's ``fix_pos_override`` to the position that will ship (exact_deploy)."""
        param, output = self.fix_positions(adjusted=True)
        for group, key, q in self.quantizers():
            q.fix_pos_override = (param if group == "param" else output)[key]

    def untrained(self) -> List[str]:
        """The quant_info keys whose quantizer never ran (still in warm-up): their position is no
        trained value (the real quantizer warns "Exported scale values are not trained")."""
        return [key for _, key, q in self.quantizers() if q.warmup_enabled[0] == 1]

    # ---- the real quantizer's helpers --------------------------------------------------------
    def _each_quantizer(self) -> Iterator[TQTQuantizer]:
        return (m for m in self.modules() if isinstance(m, TQTQuantizer))

    def _switch(self, flag: str, on: bool) -> "QatModel":
        for q in self._each_quantizer():
            getattr(q, flag)[0] = 1 if on else 0
        return self

    def enable_quant(self) -> "QatModel":
        """Quantize (the default)."""
        return self._switch("quant_enabled", True)

    def disable_quant(self) -> "QatModel":
        """Run in float: every quantizer passes its input through."""
        return self._switch("quant_enabled", False)

    def enable_warmup(self) -> "QatModel":
        """Let every quantizer set its threshold again from the next batch it sees."""
        return self._switch("warmup_enabled", True)

    def disable_warmup(self) -> "QatModel":
        """Keep the current thresholds (no warm-up)."""
        return self._switch("warmup_enabled", False)

    def freeze_quant(self) -> "QatModel":
        """Stop training the thresholds (``log_threshold.requires_grad = False``)."""
        for q in self._each_quantizer():
            q.log_threshold.requires_grad = False
        return self

    def freeze_bn_stats(self) -> "QatModel":
        """Train on with the BN running statistics (the folded conv); they stop moving."""
        for layer in self.layers().values():
            layer.freeze_bn_stats()
        return self

    def fuse_conv_bn(self) -> "QatModel":
        """Fold every BN into its conv for good; ``to_deployable`` refuses the model afterwards."""
        for layer in self.layers().values():
            layer.fuse_conv_bn()
        self.conv_bn_fused = True
        return self

    def quantizer_parameters(self) -> List[nn.Parameter]:
        """The thresholds (every parameter whose name holds ``log_threshold``)."""
        return [p for n, p in self.named_parameters() if "log_threshold" in n]

    def non_quantizer_parameters(self) -> List[nn.Parameter]:
        """The weights, biases and BN affine parameters."""
        return [p for n, p in self.named_parameters() if "log_threshold" not in n]

    # ---- back to the float model -------------------------------------------------------------
    def float_state_dict(self, float_model: nn.Module) -> Dict[str, torch.Tensor]:
        """``float_model``'s state_dict with this model's trained weights, biases and BN state in
        place of the float ones (what ``deployable.pth`` holds), on the CPU. Copies; nothing is modified."""
        state = {k: v.detach().cpu().clone() for k, v in float_model.state_dict().items()}
        for name, layer in self.layers().items():
            path, bn_path = self._shared.layer_paths[name]
            for key, value in layer.float_state().items():
                full = bn_path + key[2:] if key.startswith("bn.") else path + "." + key
                if key.startswith("bn.") and bn_path is None:
                    continue
                if full not in state:
                    if key == "bias" and bn_path is not None:
                        raise QuantizationError(
                            "QAT: %s has a bias after fuse_conv_bn() that the float model's conv %s has no "
                            "place for; call to_deployable on a model without fuse_conv_bn()" % (name, path))
                    continue
                state[full] = value.cpu().to(state[full].dtype)
        return state


def _dummy_info(session: SimSession, exact_deploy: bool) -> Dict[str, Any]:
    """A quant_info with fix position 0 at every quantized tensor: the lowering needs positions to
    place its fake_quant points; QAT replaces each of them by a quantizer. Without ``exact_deploy``, an
    output PTQ leaves unquantized on the example (an adaptive pool it does not divide) but that is no
    integer size has one too: the real QAT's quantizers are its quant config's keys, and its forms
    (``SimForm.train``) say where they quantize."""
    prefix = session.graph.class_name + "::"
    plan = session.plan
    param = {k: (None if k in plan.unquantized_params else 0) for k in plan.param_order}
    unquantized = [k for k in plan.unquantized_outputs if exact_deploy or session.graph.by_name[k].shape_value]
    output = {prefix + k: (None if k in unquantized else 0) for k in plan.output_order}
    return make_quant_info(param, output, session.bitwidth, False, "")


def _refuse_untrainable(session: SimSession, float_model: nn.Module) -> None:
    graph = session.graph
    out = set(session.plan.output_order) - set(session.plan.unquantized_outputs)
    for node in graph.nodes:
        where = "node %s (%s)" % (node.name, node.op)
        if node.op == g.CONST and node.name in out and not node.shape_value:
            raise QuantizationError(
                "QAT: %s is a Python number the quantizer quantizes (%r); QAT cannot train its position. "
                "Hold it in a registered buffer or fold it into a neighbouring layer" % (where, node.value))
        if node.op == g.BATCH_NORM:
            raise QuantizationError(
                "QAT: %s is a BatchNorm that follows no conv (e.g. BatchNorm1d after a Linear); QAT cannot train it "
                "(the real quantizer neither: Vitis-AI issue #555). Fold it into the layer before it, or drop it"
                % where)
        if node.op in g.NORM_TYPES:
            raise QuantizationError("QAT: %s: %s is not trained by this QAT; use PTQ (calib + fast "
                                    "finetune) for this model"
                                    % (where, "PReLU" if node.op == g.PRELU else g.RECORD_OF[node.op].family.replace("_", " ")))
        if node.op in g.PARAM_TYPES:
            path = node.module_path
            try:
                module = float_model.get_submodule(path) if path else None
            except AttributeError:
                module = None
            if not isinstance(module, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
                raise QuantizationError(
                    "QAT: %s computes with parameters that are not an nn.Conv2d, nn.ConvTranspose2d or nn.Linear of "
                    "the model (%s); write it as such a module" % (where, path or "a functional call"))


def _reused(session: SimSession) -> Dict[str, List[str]]:
    """module path -> its quantized nodes, for modules called more than once."""
    out = set(session.plan.output_order)
    calls = {}  # type: Dict[str, List[str]]
    for node in session.graph.nodes:
        if node.module_path and node.name in out:
            calls.setdefault(node.module_path, []).append(node.name)
    return {k: v for k, v in calls.items() if len(v) > 1}


def build_trainable(float_model: nn.Module, example: Tuple[torch.Tensor, ...], bitwidth: int,
                    exact_deploy: bool, allow_reused_module: bool,
                    session: Optional[SimSession] = None) -> QatModel:
    """The trainable model of ``float_model`` (module docstring).

    Args:
        float_model: the float model, eval-mode statistics in its BatchNorms; never modified.
        example: example inputs (float32, the trace shapes).
        bitwidth: bit width of every tensor.
        exact_deploy, allow_reused_module: see ``QatProcessor``.
        session: the QAT SimSession of ``float_model`` when the caller has it (CLE and bias
            correction off), else one is made.

    Raises:
        QuantizationError: what QAT cannot train (named, with the rewrite), a module called twice
            without ``allow_reused_module`` (real behaviour), and capture's own refusals.
    """
    if session is None:
        session = qat_session(float_model, example, bitwidth)
    _refuse_untrainable(session, float_model)
    reused = _reused(session)
    if reused and not (allow_reused_module or exact_deploy):
        path, nodes = sorted(reused.items())[0]
        raise QuantizationError(
            "QAT: module %r is called %d times in forward (%s) and the real quantizer trains one quantizer for all "
            "calls while it deploys them as separate nodes. Call trainable_model(allow_reused_module=True) to "
            "train it shared, use exact_deploy=True (each call trained as it deploys), or give each call its own "
            "module" % (path, len(nodes), ", ".join(nodes)))
    graph, plan = session.graph, session.plan
    # its adaptive pools decide their factor on every forward (ops/pool/sim.py: dpu_adaptive_factor)
    net = build_lowered(graph, plan, _dummy_info(session, exact_deploy), bitwidth, None,
                        trainable="deploy" if exact_deploy else "real")
    for attr in ("quant_info", "fast_finetuned", "output_fix_pos"):  # the test-mode model's: not this one's
        delattr(net, attr)
    net.train()
    layers = nn.ModuleDict()
    quantizers = nn.ModuleDict()
    layer_paths = {}  # type: Dict[str, Tuple[str, Optional[str]]]
    shared_q = {}  # type: Dict[str, TQTQuantizer]
    net.add_module("layers", layers)
    net.add_module("output_quantizers", quantizers)
    for node in list(net.graph.nodes):
        name = node.meta.get("nndct_node")
        if node.op == "call_module" and hasattr(getattr(net, node.target, None), "weight_fix_pos"):
            sim = graph.by_name[node.target]
            bn_path = graph.folded_bn.get(sim.module_path)
            bn = float_model.get_submodule(bn_path) if bn_path else None
            layers[node.target] = QatLayer(float_model.get_submodule(sim.module_path), bn, bitwidth, exact_deploy)
            layer_paths[node.target] = (sim.module_path, bn_path)
            delattr(net, node.target)
            node.target = "layers." + node.target
        elif node.op == "call_function" and node.target is fixpoint.fake_quant and name is not None:
            sim = graph.by_name[name]
            key = sim.module_path if (sim.module_path and not exact_deploy and sim.module_path in reused) else None
            q = shared_q.get(key) if key else None
            if q is None:
                q = TQTQuantizer(bitwidth, INPUT if sim.op == g.INPUT else OUTPUT)
                if key:
                    shared_q[key] = q
            quantizers[name] = q
            with net.graph.inserting_before(node):
                new = net.graph.call_module("output_quantizers." + name, (node.args[0],))
            new.meta.update(node.meta)
            node.replace_all_uses_with(new)
            net.graph.erase_node(node)
    net.recompile()
    model = QatModel(net, Shared(session, layer_paths), exact_deploy)
    prefix = graph.class_name + "::"
    for group, key, q in model.quantizers():
        q.name = key if group == "param" else key[len(prefix):]
    return model.train()


def qat_session(float_model: nn.Module, example: Tuple[torch.Tensor, ...], bitwidth: int) -> SimSession:
    """The SimSession QAT builds on: the DPU defaults with CLE and bias correction off (the real
    ``QatProcessor`` turns both off), ``bitwidth`` for every tensor."""
    from ...quant_config import load_quant_config
    cfg = load_quant_config(None, bitwidth)
    cfg.include_cle = False
    cfg.include_bias_corr = False
    return SimSession(float_model, tuple(e.detach().clone() for e in example), cfg)


def import_calibration(model: QatModel, calib_dir: str, redo: str, warn: bool = True) -> None:
    """Start every threshold of ``model`` at ``calib_dir/quant_info.json``'s fix position (this project's or the
    real quantizer's file): ``log_threshold = b - 1 - fix_pos``, warm-up off (the real ``import_quant_info``).
    With ``warn``, a calibration made with bias correction (the default config, CLE on too) warns: its weight
    positions belong to equalized weights, while QAT trains the model's own (CLE and bias correction off).

    Raises:
        QuantizationError: the file is missing or unreadable, has no fix position for some quantizer (another
            model's calibration), or another bit width than the model trains (the real quantizer silently takes
            the file's); ``redo`` says what to do, e.g. "run the calib step again".
    """
    info, missing, widths = read_quant_info(calib_dir), [], []
    for group, key, q in model.quantizers():
        entry = info.get(group, {}).get(key)
        if not entry or entry[0][1] is None:
            missing.append(key)
        elif int(entry[0][0]) != int(q.bitwidth[0]):
            widths.append("%s: %d" % (key, int(entry[0][0])))
    if missing:
        raise QuantizationError("QAT: %s/quant_info.json has no fix position for %s; it was calibrated for another "
                                "model: %s" % (calib_dir, ", ".join(missing[:5]), redo))
    if widths:
        trained = int(next(model.quantizers())[2].bitwidth[0])
        raise QuantizationError("QAT: %s/quant_info.json was calibrated at another bit width (%s) than this model "
                                "trains (%d bits); its fix positions do not fit: calibrate at %d bits (torch_quantizer("
                                "..., bitwidth=%d)) or train at the calibration's" % (
                                    calib_dir, ", ".join(widths[:3]), trained, trained, trained))
    if warn and info.get("bias_corrected"):
        warnings.warn("QAT: %s/quant_info.json was calibrated with bias correction (the default config, CLE on too): "
                      "its weight fix positions belong to equalized weights, while QAT trains the model's own; for a "
                      "start that fits, calibrate with {\"include_cle\": false, \"include_bias_corr\": false, "
                      "\"target_device\": \"DPU\"}" % calib_dir)
    for group, key, q in model.quantizers():
        entry = info[group][key]
        q.import_fix_pos(int(entry[0][0]), int(entry[0][1]))
