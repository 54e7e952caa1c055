"""Per-layer sensitivity: each quantized point of the sim test-mode model against the float model.

For every ``output`` entry of ``quant_info.json`` (the model input included: ``nndct_input_0`` is
one) the simulated output is compared with the float model's output at the same point, over all
evaluation batches. Per point: SQNR and cosine similarity, the float value range, the range the
fix_pos can represent and the fraction of float values it clips.

How a quantized point finds its float twin:

- The lowered test-mode model (``sim/lowered.py``, contract point 7) marks the fx node that carries
  nndct node N's output with ``node.meta["nndct_node"] == N``.
- A :class:`~pipeline.quantizers.sim.session.SimSession` built from the same float model and
  settings as the handle names the same nodes (``session.graph.by_name``); each ``SimNode`` keeps
  ``fx_node``, a node of the sim's own ``torch.fx`` trace of a copy of the float model.
- The float model's own trace (the step's ``FloatTrace``, else ``fx.float_trace.fx_trace`` of a deep copy, else
  ``fx.capture.trace_with_defaults`` on the example, as the capture follows a Python branch on sizes); fx names its
  nodes deterministically (module path, function name), so the sim's fx node and the float node
  share a name. The sim's rewrites erase nodes (``pipeline.fx.capture``: a BatchNorm folded into the conv
  before it, Dropout, Identity); when a float node's only user is such an erased node, the float
  twin moves on to it. So ``nndct_conv2d_1`` (conv1 with bn1 folded) is compared with the float
  ``bn1`` output, and the quantized end of a conv+BN+ReLU group (``nndct_relu_2``) with the float
  ReLU output. The op and target of each pair are checked; a float model that traces differently
  from the sim's capture raises :class:`~pipeline.errors.QuantizationError`.

Cross-layer equalization (CLE, option ``include_cle``, on by default; ``sim/cle.py``): for a conv
pair ``(c0, c1)`` the quantizer divides c0's output channel k by ``s[k]`` and multiplies c1's input
channel k by ``s[k]``, so every tensor from c0's output up to c1's input (the ReLU and pool outputs
between them) is the float tensor divided by ``s`` per channel (ReLU and pooling commute with a
positive per-channel scale). These points are compared **in the float model's scale**: the
simulated value is multiplied back by ``s[k]`` before SQNR and cosine are computed, so they measure
the quantization error in the float model's units and stay comparable with every other row (marking
the rows and leaving them unmeasured would hide the layers CLE is meant to help). The value range,
the representable range and the clipped fraction are in the **quantized graph's scale** (the float
values divided by ``s``), because that is where the fix_pos applies; for these rows ``graph_min`` /
``graph_max`` differ from ``float_min`` / ``float_max``, ``cle_rescaled`` is True and ``cle_scale``
gives the smallest and largest ``s[k]``, as ``cle.equalize`` applied it.

The handle must be the sim's. A calibration made by the real quantizer (``nndct`` backend) is
measured the same way: ``session.load_test_model`` builds the sim handle from its quant_info.json and
bias_corr.pth (the sim is bit-exact with it; tests/sim/test_sim_golden.py), as ``pipeline.sensitivity``
does for the test step.

Statistics are accumulated in float64 per batch; only the running sums are kept, never the
activations. The float model and the handle run side by side, node by node (a ``torch.fx``
interpreter over each graph), and each pair of values is reduced as soon as both exist, so the
extra memory is about one inference of each model.
"""
import copy
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import torch
import torch.fx
from torch import nn

from ...errors import DataError, QuantizationError
from ...fx.capture import trace_with_defaults
from ...fx.float_trace import fx_trace
from ..sensitivity_rows import LayerSensitivity
from .sensitivity_stats import Accumulator, Point, describe


def layer_sensitivity(float_model: nn.Module, handle: torch.fx.GraphModule, quant_info: Dict[str, Any],
                      batches: Iterable[torch.Tensor], settings: Any, comm: Any = None,
                      example: Optional[torch.Tensor] = None, traced: Any = None) -> List[LayerSensitivity]:
    """SQNR, cosine similarity and value ranges of every quantized point of ``handle`` vs float.

    Args:
        float_model: the caller's float model (eval mode). Never modified: a deep copy on the CPU,
            in eval mode, is traced and run.
        handle: the simulation's test-mode model (``session.load_test_model``; contract in
            ``pipeline/quantizers/sim/lowered.py``). Only run, never modified.
        quant_info: the ``quant_info.json`` dict ``handle`` was built from. Its ``output``
            entries, ``"<Class>::<node>": [[bitwidth, fix_pos]]``, choose the rows; an entry that
            names no node of ``handle`` (nndct may have extra ones) is left out.
        batches: float32 NCHW evaluation batches (any batch sizes, same per-sample shape as the
            example the handle was built with); not modified. Consumed once.
        settings: the ``pipeline.quantizers.base.QuantSettings`` the handle was made with (its
            ``quant_config_file`` and ``bitwidth`` decide CLE and the ReLU6 swap, hence the node
            names and the CLE scales).
        comm: under torch.distributed, a ``pipeline.distributed.Comm``: ``batches`` is this rank's
            shard, each batch's sums are kept and every rank's are added in global batch order
            at the end, so the table is one process's, bit for bit (a collective).
        example: float32 NCHW example input, used when this rank's shard is empty (with ``comm``).
        traced: the step's ``pipeline.fx.float_trace.FloatTrace`` of ``float_model``: its graph is run
            as the float side (no new trace). The session that built ``handle``
            (its ``sim_session`` attribute) is reused when its config is ``settings``'.

    Returns:
        One :class:`~pipeline.quantizers.sensitivity_rows.LayerSensitivity` per quantized point, in graph
        order (the model input first); its docstring says what each field holds.

    Raises:
        DataError: no batches, or a batch that is not a float32 tensor of the example's rank.
        QuantizationError: ``settings`` are not those of the handle (other nodes or weights, e.g.
            another CLE switch), the float model does not trace like the sim's capture (a node or
            its op differs), or shapes differ at a point.
        ConfigError: a bad ``settings.quant_config_file``.
    """
    from ..quant_config import settings_quant_config
    from .session import SimSession

    iterator = iter(batches)
    first = next(iterator, None)
    if first is None and (comm is None or example is None):
        raise DataError("layer sensitivity needs evaluation batches and got none; check the eval split")
    if first is not None:
        _check_batch(first, 0, first.dim() if isinstance(first, torch.Tensor) else 4)
        example = first[:1].detach().cpu()
    cfg = settings_quant_config(settings)
    session = getattr(handle, "sim_session", None)
    if session is None or vars(session.cfg) != vars(cfg):
        session = SimSession(float_model, example, cfg, traced)
    float_gm = _trace_float(float_model, example, traced)
    points = _match_points(float_gm, handle, quant_info, session)
    scales = _cle_scales(session)
    accs = [Accumulator(p, scales.get(p.name), keep_batches=comm is not None) for p in points]
    by_name = {a.point.name: a for a in accs}
    float_wanted = {p.float_node: p.name for p in points}
    quant_wanted = {p.quant_node: p.name for p in points}
    with torch.no_grad():
        batch = first
        index = 0
        while batch is not None:
            _check_batch(batch, index, first.dim())
            x = batch.detach().cpu()
            # the float copy gets its own input: an in-place op on it must not reach the handle
            _compare(_walk(float_gm, x.clone(), float_wanted), _walk(handle, x, quant_wanted), by_name)
            batch = next(iterator, None)
            index += 1
    if comm is not None:  # every rank's batches, in global batch order
        for acc, by_rank in zip(accs, zip(*comm.gather([(a.shape, a.kept) for a in accs]))):
            acc.shape = next((shape for shape, _ in by_rank if shape is not None), None)
            for chunks in comm.interleave([kept for _, kept in by_rank]):
                for chunk in chunks:
                    acc.apply(chunk)
    return [a.row() for a in accs]


def _check_batch(batch: Any, index: int, dim: int) -> None:
    if not isinstance(batch, torch.Tensor) or batch.dtype != torch.float32 or batch.dim() != dim or dim < 2:
        raise DataError("layer sensitivity: batch %d must be a float32 NCHW torch.Tensor of rank %d, got %s"
                        % (index, dim, describe(batch)))


def _trace_float(float_model: nn.Module, example: torch.Tensor, traced: Any = None) -> torch.fx.GraphModule:
    if traced is not None and traced.graph is not None:  # the step's trace: its copy runs, never changes
        return torch.fx.GraphModule(traced.module, traced.graph_copy())
    work = copy.deepcopy(float_model).cpu().eval()
    try:
        return torch.fx.GraphModule(*fx_trace(lambda: work))
    except Exception as e:  # fx raises many types; the sim's capture traced it already
        try:  # forward(x, flag=False): its defaults traced in; a branch on sizes followed on the example
            return torch.fx.GraphModule(*trace_with_defaults(float_model, (example,)))
        except QuantizationError:
            pass
        raise QuantizationError("layer sensitivity: the torch.fx trace of %s failed (%s), although the "
                                "sim quantizer traced it; report this with the model" % (type(float_model).__name__, e))


def _target_name(node: torch.fx.Node) -> str:
    if node.op == "placeholder":
        return "input"
    if node.op in ("call_module", "call_method", "get_attr"):
        return str(node.target)
    return getattr(node.target, "__name__", str(node.target))


def _match_points(float_gm: torch.fx.GraphModule, handle: torch.fx.GraphModule, quant_info: Dict[str, Any],
                  session: Any) -> List[Point]:
    """The rows: quant_info output entries that name a node of ``handle``, in graph order."""
    from ... import fixpoint

    _check_same_quantizer(handle, session)
    graph = session.graph
    prefix = graph.class_name + "::"
    entries = {k[len(prefix):]: v for k, v in quant_info.get("output", {}).items() if k.startswith(prefix)}
    quant_nodes = {n.meta["nndct_node"]: n for n in handle.graph.nodes if "nndct_node" in n.meta}
    float_nodes = {n.name: n for n in float_gm.graph.nodes}
    sim_names = set(n.name for n in graph.gm.graph.nodes)
    points = []
    for sim in graph.nodes:
        if sim.name not in entries or sim.name not in quant_nodes or entries[sim.name][0][1] is None:
            continue  # no entry, or a null one (shape arithmetic: nothing is quantized there)
        fx = sim.fx_node
        twin = float_nodes.get(fx.name)
        if twin is None or twin.op != fx.op or twin.target != fx.target:
            raise QuantizationError(
                "layer sensitivity: the float model's fx trace has %s where the sim's capture has node %r "
                "(%s %s) for %s; the model must trace the same way twice (no state-dependent forward)"
                % ("no such node" if twin is None else "%s %s" % (twin.op, twin.target), fx.name, fx.op,
                   fx.target, sim.name))
        quant = quant_nodes[sim.name]
        notes = _op_notes(float_gm, twin, handle, sim.name, quant)
        while len(twin.users) == 1:  # a BatchNorm folded into this conv, a Dropout or Identity removed
            user = next(iter(twin.users))
            if user.name in sim_names or not user.args or user.args[0] is not twin:
                break
            twin = user
        bitwidth, fix_pos = (int(v) for v in entries[sim.name][0])  # [[bitwidth, fix_pos]] (quant_info.py)
        if not (quant.op == "call_function" and quant.target is fixpoint.fake_quant):
            notes.append("left unquantized by the test-mode model (no fake_quant at this point)")
        points.append(Point(sim.name, sim.op, fix_pos, bitwidth, twin, _target_name(twin), quant, notes))
    return points


def _check_same_quantizer(handle: torch.fx.GraphModule, session: Any) -> None:
    """Raise QuantizationError unless ``handle`` was built from ``session``'s graph: the same nndct
    nodes, and every conv/linear weight equal to the session's (BN folded, CLE as configured)
    quantized with the handle's weight fix_pos (a fast-finetuned handle's weights differ on purpose: only
    its nodes are checked). Settings with another CLE switch fail here."""
    from ... import fixpoint
    from ...ops import PARAM_TYPES

    graph = session.graph
    unknown = sorted(set(n.meta["nndct_node"] for n in handle.graph.nodes if "nndct_node" in n.meta)
                     - set(graph.by_name))
    modules = dict(handle.named_children())
    differ = []
    for sim in graph.nodes:
        if sim.op in PARAM_TYPES and sim.name in modules and not getattr(handle, "fast_finetuned", False):
            m = modules[sim.name]
            expected = fixpoint.fake_quant(graph.module(sim).weight.detach(), m.weight_fix_pos, m.bitwidth, "std_round")
            if not torch.equal(expected, m.weight.detach()):
                differ.append(sim.name)
    if unknown or differ:
        raise QuantizationError("layer sensitivity: the test-mode model was not built with these settings (%s); pass "
                                "the QuantSettings (quant_config_file, bitwidth) the handle was loaded with"
                                % ("nodes %s are not in the float model's graph" % ", ".join(unknown) if unknown
                                   else "weights of %s differ" % ", ".join(differ)))


def _op_notes(float_gm: torch.fx.GraphModule, twin: torch.fx.Node, handle: torch.fx.GraphModule,
              name: str, quant: torch.fx.Node) -> List[str]:
    """Where the quantized model computes something else than the float op, on purpose (docs/arithmetic.md):
    a module swapped (ReLU6 -> ReLU with CLE), the DPU LeakyReLU slope, a DPU pooling factor."""
    from ... import fixpoint

    notes = []
    if twin.op == "call_module" and name in dict(handle.named_children()):
        original, quantized = float_gm.get_submodule(twin.target), handle.get_submodule(name)
        if type(original) is not type(quantized):
            notes.append("float %s runs as %s in the quantized model" % (type(original).__name__,
                                                                       type(quantized).__name__))
        elif getattr(original, "negative_slope", None) != getattr(quantized, "negative_slope", None):
            notes.append("LeakyReLU slope %.7g runs as %.7g on the DPU" % (original.negative_slope,
                                                                       quantized.negative_slope))
    value = quant.args[0] if quant.op == "call_function" and quant.target is fixpoint.fake_quant else quant
    if value.op == "call_function" and value.target is torch.mul and isinstance(value.args[1], float) \
            and value.args[0].op == "call_module" and value.args[0].target == name:
        notes.append("output multiplied by the DPU pooling factor %.7g" % value.args[1])
    return notes


# ---------------------------------------------------------------------- CLE

def _cle_scales(session: Any) -> Dict[str, torch.Tensor]:
    """nndct node name -> float64 ``s`` (one per channel) for the outputs CLE divides by ``s``: from
    c0 up to (not including) c1 of each pair ``session.cle_pairs`` (``cle.equalize``) returns."""
    graph = session.graph
    rescaled = {}  # type: Dict[str, torch.Tensor]
    for pair in session.cle_pairs:
        s = torch.from_numpy(pair.scale).double()
        node = graph.by_name[pair.c0]
        while node.name != pair.c1:  # c0 ... c1: ReLU and pool nodes with one consumer each (cle.py)
            rescaled[node.name] = s
            node = node.users[0]
    return rescaled


# ---------------------------------------------------------------------- running

def _walk(gm: torch.fx.GraphModule, x: torch.Tensor,
          wanted: Dict[torch.fx.Node, str]) -> Iterator[Tuple[str, torch.Tensor]]:
    """Run ``gm`` on ``x`` node by node; yield ``(name, value)`` right after each wanted node runs.

    A value is freed after its last use, as ``torch.fx.Interpreter.run`` does.
    """
    interp = torch.fx.Interpreter(gm, garbage_collect_values=False)
    env = {}  # type: Dict[torch.fx.Node, Any]
    interp.env = env
    last_use = {}  # type: Dict[torch.fx.Node, torch.fx.Node]
    for node in gm.graph.nodes:
        for used in node.all_input_nodes:
            last_use[used] = node
    free_after = {}  # type: Dict[torch.fx.Node, List[torch.fx.Node]]
    for used, user in last_use.items():
        free_after.setdefault(user, []).append(used)
    for node in gm.graph.nodes:
        if node.op == "output":
            return
        env[node] = x if node.op == "placeholder" else interp.run_node(node)
        if node in wanted:
            yield wanted[node], env[node]
        for used in free_after.get(node, []):
            del env[used]


def _compare(floats: Iterator[Tuple[str, torch.Tensor]], quants: Iterator[Tuple[str, torch.Tensor]],
             accs: Dict[str, Accumulator]) -> None:
    """Feed each (float, quant) pair to its accumulator as soon as both exist.

    Float values are used at once (the float model may later overwrite them in place); quantized
    values that come first wait (the test-mode model never writes in place).
    """
    waiting = {}  # type: Dict[str, torch.Tensor]
    for name, f in floats:
        while name not in waiting:
            got = next(quants, None)
            if got is None:
                raise QuantizationError("layer sensitivity: the test-mode model never produced %s" % name)
            waiting[got[0]] = got[1]
        accs[name].add(f, waiting.pop(name))
