"""The interpreter against the simulation: the proof every written xmodel gets (docs/xmodel.md#verification).

:func:`compare` runs an XIR graph (``interp.run``) on the batch-1 example and compares, bit for bit,
its outputs and every intermediate op that stands for a node of the simulation with the simulation's
test-mode model on the same input. The file carries no parameters for custom float operators (a
clamp's bounds): :func:`float_ops_from_sim` takes their functions from the simulation's own calls.
"""
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.fx

from ....errors import ExportError
from ....fx.in_place import writes_first_argument
from .... import fixpoint
from .... import ops as t
from ..finite import agreement, check_compared, check_inputs
from ....xir.interp import by_shape, fit_layout, model_readings, run, to_model_layout
from ....xir.interp_base import TO_NHWC, FloatOp, InterpreterError, op_error
from ....xir.interp_ops import determined, is_custom
from ....xir.xgraph import XGraph, XOp, formal_name


def _as_list(y: Any) -> List[torch.Tensor]:
    return list(y) if isinstance(y, (tuple, list)) else [y]


def record(lowered: torch.fx.GraphModule, examples: Sequence[torch.Tensor]) -> Tuple[List[torch.Tensor],
                                                                                  Dict[torch.fx.Node, Any]]:
    """Run the simulation's test-mode model on ``examples`` (no grad): its outputs (a list) and
    every fx node's value (a value a later call writes in place, ``F.relu_(y)``, as it was before). The
    graph runs on copies of ``examples``: they are never written."""
    values = {}  # type: Dict[torch.fx.Node, Any]

    class _Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            if writes_first_argument(lowered, n) and isinstance(values.get(n.args[0]), torch.Tensor):
                values[n.args[0]] = values[n.args[0]].clone()
            values[n] = super().run_node(n)
            return values[n]

    with torch.no_grad():  # the examples' copies: a graph that writes its input in place never writes them
        out = _as_list(_Recorder(lowered).run(*(e.clone() for e in examples)))
    if not all(isinstance(y, torch.Tensor) for y in out):
        kinds = sorted({"a dict" if isinstance(y, dict) else "a nested tuple/list" if isinstance(y, (tuple, list))
                        else type(y).__name__ for y in out if not isinstance(y, torch.Tensor)})
        raise ExportError("xmodel: the model returns %s; the xmodel carries a tensor or a flat tuple/list of tensors "
                          "(return the tensors themselves, e.g. a tuple instead of a dict)" % ", ".join(kinds))
    return out, values


def sim_names(session: Any, examples: Sequence[torch.Tensor]) -> Dict[str, str]:
    """The nndct names of the simulation's nodes, as ``writer.build_xgraph`` computes them (a trace
    of the swapped float model)."""
    from ....fx.rewrites import swap_modules
    from ....fx.work_copy import work_copy
    from .names import node_names
    swapped = work_copy(session.model)
    swap_modules(swapped, session.cfg.rewrites())
    return node_names(session.graph, swapped, tuple(e.detach().cpu().float() for e in examples))


def _float_op_node(lowered: torch.fx.GraphModule, sim_node: str) -> Optional[torch.fx.Node]:
    for n in lowered.graph.nodes:
        if n.meta.get("nndct_node") == sim_node:
            while n.op == "call_function" and n.target is fixpoint.fake_quant:
                n = n.args[0]
            return n
    return None


def _sim_call(lowered: torch.fx.GraphModule, fx_node: torch.fx.Node, values: Dict[torch.fx.Node, Any],
              op: XOp) -> FloatOp:
    from ..ops import run_fx
    data = [n for n in fx_node.all_input_nodes if n.op != "get_attr" and isinstance(values.get(n), torch.Tensor)]
    fixed = {n: values.get(n) for n in fx_node.all_input_nodes}
    # the file holds every value as float32 (a custom op's data_type, docs/xmodel.md#ops); the simulation's
    # call takes its inputs in the dtypes they had there (torch.where's condition is a bool tensor)
    dtypes = [values[n].dtype for n in data]
    # a module's float parameters follow its data inputs as consts (custom_xop writes every input tensor, a
    # parameter as its const: aten::_convolution_mode's weight and bias); the module holds the same values
    params = [] if fx_node.op != "call_module" else \
        [p for p in (getattr(lowered.get_submodule(fx_node.target), k, None) for k in ("weight", "bias"))
         if isinstance(p, torch.Tensor)]

    # a traced size the op takes as a tensor (an nndct_shape input: lower.size_kept) is an int of the recorded run
    # in the simulation's call, which takes it from there
    sizes = [i for i, o in enumerate(op.input_list()) if o.type == t.SHAPE]
    # a custom op of an nndct type (nndct_log_softmax, ...) is laid out as its neighbours: where the file holds
    # its data NHWC and the simulation NCHW, the call runs on the inputs read as NCHW, its result put back
    out = values.get(fx_node)
    nhwc = isinstance(out, torch.Tensor) and out.dim() == 4 and list(op.shape) != list(out.shape) \
        and list(op.shape) == [out.shape[i] for i in TO_NHWC]
    first = values.get(data[0]) if data else None

    def reads_nhwc(x: torch.Tensor) -> bool:
        # C = H = W leaves the dims alike: the first input's bits tell (the simulation's value, as is or NHWC)
        if isinstance(first, torch.Tensor) and x.dim() == 4 and tuple(x.shape) == tuple(first.shape):
            if torch.equal(x, first.to(x.dtype)):
                return False
            if torch.equal(to_model_layout(x), first.to(x.dtype)):
                return True
        return nhwc

    def call(xs: List[torch.Tensor]) -> torch.Tensor:
        xs = [x for i, x in enumerate(xs) if i not in sizes]
        if xs and reads_nhwc(xs[0]):
            return run_nchw([to_model_layout(x) for x in xs]).permute(TO_NHWC)
        return run_nchw(xs)

    def run_nchw(xs: List[torch.Tensor]) -> torch.Tensor:
        if len(xs) not in (len(data), len(data) + len(params)):
            raise op_error(op, "the simulation's %s takes %d tensors, the op has %d inputs"
                           % (fx_node.name, len(data), len(xs)))
        for p, x in zip(params, xs[len(data):]):
            if tuple(x.shape) != tuple(p.shape) or not torch.equal(x.to(p.dtype), p.detach()):
                raise op_error(op, "a parameter const differs from the simulation's %s" % fx_node.name)
        # an in-place call (y.neg_()) writes its input: given a copy, never the interpreter's value of the op before
        xs = [x.clone() for x in xs[:len(data)]] if writes_first_argument(lowered, fx_node) else xs[:len(data)]
        env = dict(fixed)
        env.update((n, x if x.dtype == dtype else x.to(dtype)) for n, x, dtype in zip(data, xs, dtypes))
        y = run_fx(lowered, fx_node, env)
        # a call of several outputs (topk: values, indices): the op carries its first (nndct's out_tensors[0])
        return y[0] if isinstance(y, tuple) else y
    return call


def float_ops_from_sim(graph: XGraph, session: Any, lowered: torch.fx.GraphModule,
                       examples: Sequence[torch.Tensor], names: Optional[Dict[str, str]] = None,
                       values: Optional[Dict[torch.fx.Node, Any]] = None) -> Dict[str, FloatOp]:
    """``float_ops`` for every custom op of ``graph`` but those the file determines (``interp_ops.determined``:
    its unit's ``CustomKernel.complete``, or a generic float operator's the type name determines,
    ``xir/aten_ops.py``; the comparison then holds that kernel to the simulation's output bit for bit): the
    simulation's own torch call for it.

    The custom op named ``formal_name(names[node])`` runs the lowered model's fx node of that
    simulation node (before its ``fake_quant``), its tensor arguments replaced by the op's inputs
    and its other arguments (shape arithmetic) taken from the recorded run on ``examples``.

    Args:
        graph: the XGraph (writer's or rebuilt); session, lowered: the simulation (``SimSession`` and
            its test-mode model); examples: the batch-1 inputs (NCHW, one per model input).
        names: sim node name -> nndct name (:func:`sim_names`; computed when None).
        values: fx node -> value of a recorded run (:func:`record`; recorded when None).

    Raises:
        InterpreterError: a custom op whose simulation node cannot be found (named).
    """
    custom = [op for op in graph.ops if is_custom(op.type) and not determined(op.type)]
    if not custom:
        return {}
    names = sim_names(session, examples) if names is None else names
    if values is None:
        values = record(lowered, examples)[1]
    by_op = {formal_name(nndct): sim for sim, nndct in names.items()}
    table = {}  # type: Dict[str, FloatOp]
    for op in custom:
        fx_node = _float_op_node(lowered, by_op[op.name]) if op.name in by_op else None
        if fx_node is None:
            raise op_error(op, "no node of the simulation computes it")
        table[op.name] = _sim_call(lowered, fx_node, values, op)
    return table


LAYOUT_ONLY = frozenset(("data", "const", "stack", "reshape", "flatten", "squeeze", "transpose"))


def _compare_nodes(graph: XGraph, results: Mapping[str, torch.Tensor], names: Dict[str, str],
                   values: Dict[torch.fx.Node, Any]) -> Tuple[int, List[str]]:
    """Every op standing for a simulation node (its ``_fix`` op when it has one) against the node's
    recorded value: ``(ops compared, names of those that differ)``. An op counts as equal when its
    value, in the file's layout or the model's (``interp.model_readings``), or the value before its
    fix (a fix the simulation applies only at the consumer: a Hardswish quantized with its group's
    fix position) has the node's dims and bits; NaN or inf count as equal nowhere, and an op whose
    every element is NaN or inf alike on both sides is not counted as compared
    (``pipeline.quantizers.sim.finite``). Ops that only lay data out (reshape, transpose, ...:
    the file may flatten NHWC where the model flattened NCHW) and nodes the deploy graph folded
    away (a pad, a contiguous) are not compared."""
    compared, differing = 0, []  # type: int, List[str]
    for fx_node, value in values.items():
        node = fx_node.meta.get("nndct_node")
        if node is None or node not in names or not isinstance(value, torch.Tensor):
            continue
        base = formal_name(names[node])
        op = graph.get_op(base + "_fix") or graph.get_op(base)
        if op is None:
            continue
        producer = op.inputs["input"][0] if op.type == "fix" else op
        if producer.type in LAYOUT_ONLY:
            continue
        mines = [results[op.name]] + ([results[producer.name]] if producer is not op else [])
        candidates = [agreement(c, value, bits=True) for m in mines for c in model_readings(m)
                      if list(c.shape) == list(value.shape)]
        if candidates and all(c.elements == 0 for c in candidates):
            continue  # NaN or inf alike on both sides: nothing to compare (finite.py, rule 3)
        compared += 1
        if not any(c.mismatches == 0 for c in candidates):
            differing.append(op.name)
    return compared, differing


def _bits_differ(a: torch.Tensor, b: torch.Tensor) -> int:
    a, b = a.detach().float().contiguous(), b.detach().float().contiguous()
    return int((a.view(torch.int32) != b.view(torch.int32)).sum())


def _as_model_output(value: torch.Tensor, sim: torch.Tensor) -> torch.Tensor:
    """An output of the file in the model's layout (``interp.fit_layout``); where both readings of
    a 4-D output fit (C = H = W), the bit-equal one, NHWC first. A value that fits neither comes
    back as NHWC read as NCHW, for the dims error to show."""
    value_nchw = to_model_layout(value)
    if value.dim() == 4 and list(value.shape) == list(value_nchw.shape) == list(sim.shape):
        return value if _bits_differ(value_nchw, sim) and not _bits_differ(value, sim) else value_nchw
    fitted = fit_layout(value, sim.shape)
    return fitted if fitted is not None else value_nchw


def _output_nodes(lowered: torch.fx.GraphModule, count: int) -> List[Optional[torch.fx.Node]]:
    """The fx node of each of the ``count`` model outputs (in the model's order, repeats kept: a model
    returning ``(y, y)`` gives the same node twice); None where an output is not one node."""
    out = next((n.args[0] for n in lowered.graph.nodes if n.op == "output"), None)
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(items) != count:
        return [None] * count
    return [n if isinstance(n, torch.fx.Node) else None for n in items]


def _match_outputs(graph: XGraph, results: Mapping[str, torch.Tensor], names: Dict[str, str],
                   lowered: torch.fx.GraphModule, sim_out: List[torch.Tensor]) -> List[Tuple[str, torch.Tensor]]:
    """(op name, value in the file) for each model output, in the model's order. Each distinct output
    node is the op of its nndct name (its ``_fix`` op when it has one); a model output the names do
    not give is matched by shape (``interp.by_shape``). The file holds a tensor the model returns twice
    once: both outputs read that op."""
    nodes = _output_nodes(lowered, len(sim_out))
    first = {}  # type: Dict[Any, int]   # output node (or position) -> index of its first output
    distinct = []  # type: List[int]
    for i, node in enumerate(nodes):
        key = node if node is not None else i
        if key not in first:
            first[key] = i
            distinct.append(i)
    ops = []  # type: List[Tuple[str, torch.Tensor]]
    for i in distinct:
        sim_node = nodes[i].meta.get("nndct_node") if nodes[i] is not None else None
        base = formal_name(names[sim_node]) if sim_node in names else ""
        op = (graph.get_op(base + "_fix") or graph.get_op(base)) if base else None
        if op is None:
            ops = by_shape(graph, results, [list(sim_out[j].shape) for j in distinct])
            break
        ops.append((op.name, results[op.name]))
    by_first = dict(zip(distinct, ops))
    return [by_first[first[nodes[i] if nodes[i] is not None else i]] for i in range(len(sim_out))]


def _part_io(graph: XGraph, names: Dict[str, str], lowered: torch.fx.GraphModule,
             values: Dict[torch.fx.Node, Any]) -> Optional[Tuple[Dict[str, torch.Tensor], List[Tuple[str, torch.Tensor]]]]:
    """For a quantized part of a model with QuantStubs (a data op that is no model input): each data op's input,
    the simulation's value of its QuantStub before quantization, and each of the part's last ops (read by no op
    of the file) with the simulation's value of its node; None for a graph of the whole model."""
    by_op = {formal_name(nndct): sim for sim, nndct in names.items()}
    datas = [op for op in graph.ops if op.type == "data"]
    if all(by_op.get(op.name, "").startswith("nndct_input_") for op in datas):
        return None
    value_of = {n.meta["nndct_node"]: n for n in lowered.graph.nodes if "nndct_node" in n.meta}
    inputs = {}  # type: Dict[str, torch.Tensor]
    for op in datas:
        node = _float_op_node(lowered, by_op.get(op.name, ""))
        if node is None:
            raise op_error(op, "no node of the simulation feeds it")
        inputs[op.name] = values[node]
    read = {i.name for op in graph.ops for ins in op.inputs.values() for i in ins}
    outputs = []  # type: List[Tuple[str, torch.Tensor]]
    for op in graph.ops:
        base = op.inputs["input"][0].name if op.type == "fix" else op.name
        if op.name in read or op.type in ("const", "data") or graph.get_op(base).type == "const":
            continue
        if by_op.get(base) not in value_of:
            raise op_error(op, "no node of the simulation computes it")
        outputs.append((op.name, values[value_of[by_op[base]]]))
    return inputs, outputs


def compare(graph: XGraph, session: Any, lowered: torch.fx.GraphModule, examples: Sequence[torch.Tensor],
            names: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Run ``graph`` on the batch-1 ``examples`` and compare its outputs with the simulation's, bit by bit.

    A quantized part of a model with QuantStubs runs on the simulation's values at its QuantStubs and its
    last ops are its outputs (:func:`_part_io`). Each model output (the lowered model's, in the model's
    order; a tensor returned twice is one op of the file, read by both) is matched to the op of the same nndct name (its ``_fix`` op when it
    has one); outputs that cannot be matched by name are matched by shape (:func:`_match_outputs`). Custom ops run the simulation's own calls
    (:func:`float_ops_from_sim`). Every other op that stands for a simulation node is compared with
    the node's value too (see :func:`_compare_nodes`): a wrong intermediate can hide behind outputs
    that happen to agree after quantization.

    Args:
        graph: the XGraph to check; session, lowered: the simulation; examples: one batch-1 float32
            NCHW tensor per model input. names: as :func:`float_ops_from_sim` (computed when None).

    NaN and inf follow ``pipeline.quantizers.sim.finite``: a non-finite example is refused before
    anything runs, an output element NaN or inf on both sides alike is not compared (``nonfinite``),
    one non-finite on one side only differs, and a comparison of nothing finite is refused.

    Returns:
        ``{"outputs": [{"op", "shape", "elements", "mismatches", "nonfinite"}], "elements": output elements
        compared, "mismatches": those whose float32 bits differ, "nonfinite": output elements NaN or inf
        alike on both sides (not compared), "max_abs_diff": float (over the compared elements),
        "nodes_compared": ops compared with their simulation node, "nodes_differing": [op names]}``.

    Raises:
        InterpreterError: the graph cannot be run (named op) or its outputs do not fit the model's.
        ExportError: an example holds NaN or inf; no output element could be compared.
    """
    examples = [e.detach().cpu().float() for e in examples]
    check_inputs(examples, "xmodel", "give a finite batch-1 example (with the drop-in API: the first test-mode "
                 "forward, quant_model(x[:1]) on a real sample, in a new test-mode quantizer); nothing was written")
    sim_out, values = record(lowered, examples)
    names = sim_names(session, examples) if names is None else names
    part = _part_io(graph, names, lowered, values)  # a quantized part: its QuantStubs' inputs, its last ops
    results = run(graph, examples if part is None else part[0],
                  float_ops_from_sim(graph, session, lowered, examples, names, values))
    if part is None:
        matched = [(name, _as_model_output(value, sim))
                   for (name, value), sim in zip(_match_outputs(graph, results, names, lowered, sim_out), sim_out)]
    else:
        sim_out = [sim for _, sim in part[1]]
        matched = [(name, _as_model_output(results[name], sim)) for name, sim in part[1]]
    compared, differing = _compare_nodes(graph, results, names, values)
    report = {"outputs": [], "elements": 0, "mismatches": 0, "nonfinite": 0, "max_abs_diff": 0.0,
              "nodes_compared": compared, "nodes_differing": differing}  # type: Dict[str, Any]
    for (name, mine), sim in zip(matched, sim_out):
        if list(mine.shape) != list(sim.shape):
            raise InterpreterError("xmodel interpreter: output %r has dims %s, the simulation's %s"
                                   % (name, list(mine.shape), list(sim.shape)))
        a = agreement(mine, sim, bits=True)
        report["outputs"].append({"op": name, "shape": list(sim.shape), "elements": a.elements,
                                  "mismatches": a.mismatches, "nonfinite": a.nonfinite})
        report["elements"] += a.elements
        report["mismatches"] += a.mismatches
        report["nonfinite"] += a.nonfinite
        report["max_abs_diff"] = max(report["max_abs_diff"], a.max_abs_diff)
    check_compared("xmodel", report["elements"], report["nonfinite"], "the batch-1 example", "; nothing was written")
    return report
