"""The graph walk: record the lowered model, emit every node through its handler, write the
graph's inputs, outputs and metadata, check it with onnx.checker and write the file."""
import json
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx

from ....._version import __version__
from .....fx.refusals import ONNX, explain
from .....errors import ExportError
from .....fileio import write_bytes
from .....ops.onnx_form import NO_LOWERING
from .....ops.slicing import is_split
from .builder import BATCH_DIM, INPUT_NAME, IR_VERSION, OPSET, PRODUCER_NAME, Builder, Unsupported, record
from .flavours import FLAVOUR_CLASSES, FLAVOURS
from .fold import folded_values, independent_nodes
from .handlers import handler_of, supported, target_name
from ...lowered_forward import for_inputs

# --------------------------------------------------------------------------- graph walk


def _emit(b: Builder, node: torch.fx.Node) -> None:
    meta = b.meta1.get(node.name, ("other", "nothing"))
    if node.op == "placeholder":
        b.names[node.name] = b.input_names[node.name]
        return
    if node.op == "get_attr":
        value = _get_attr(b.gm, node.target)
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32 \
                and any(u.name not in b.independent for u in node.users):
            b.names[node.name] = b.init(node.name, value.detach().cpu().contiguous().numpy())
        return  # else (an index buffer, a table gathered by it) folded where an input-dependent node reads it
    if node.name in b.independent:
        return  # no input reaches it: written as its value where an input-dependent node reads it
    if meta[0] == "value":
        return  # a Python value (constant or shape): read by the nodes that use it
    if is_split(node):
        return  # a tuple of pieces: each getitem of it is a Slice
    if meta[0] != "tensor":
        raise Unsupported(explain(node, b.gm, ONNX, "produces a %s, not one tensor" % meta[1], several=True))
    if meta[2] != torch.float32:
        raise Unsupported("produces dtype %s, expected float32" % meta[2])
    handler, mod = handler_of(b.gm, node)
    if handler is None:
        raise Unsupported(explain(node, b.gm, ONNX, NO_LOWERING))
    b.names[node.name] = handler(b, node, mod)


def _get_attr(gm: torch.nn.Module, target: str) -> Any:
    value = gm  # type: Any
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _outputs(node: Optional[torch.fx.Node]) -> List[torch.fx.Node]:
    out = node.args[0] if node is not None else None
    if isinstance(out, torch.fx.Node):
        return [out]
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.fx.Node) for o in out):
        return list(out)
    raise Unsupported("the model must return a tensor or a tuple/list of tensors, got %r" % (out,))


def _grouped(problems: List[Tuple[str, str]], shown: int = 4) -> str:
    """The unsupported nodes grouped by reason, in first-seen order, each reason said once:
    "node (op, target): why" for a reason of one node, "12 nodes [a (...), b (...), c (...), d (...)
    and 8 more]: why" for many; so a bit width the flavour cannot hold is one sentence, not one
    per node."""
    by_reason = {}  # type: Dict[str, List[str]]
    for node, why in problems:
        by_reason.setdefault(why, []).append(node)
    parts = []
    for why, nodes in by_reason.items():
        if len(nodes) == 1:
            parts.append("%s: %s" % (nodes[0], why))
        else:
            more = " and %d more" % (len(nodes) - shown) if len(nodes) > shown else ""
            parts.append("%d nodes [%s%s]: %s" % (len(nodes), ", ".join(nodes[:shown]), more, why))
    return "; ".join(parts)


def _free_name(name: str, taken: set) -> str:
    """``name``, or ``name_io``, ``name_io1``, ... : the first not in ``taken``."""
    candidate, i = name, 0
    while candidate in taken:
        candidate = "%s_io%s" % (name, i or "")
        i += 1
    return candidate


def _check_example(example1: Any) -> None:
    if not isinstance(example1, torch.Tensor):
        raise ExportError("export needs the example input as a torch.Tensor, got %s"
                          % type(example1).__name__)
    if example1.dim() < 1 or example1.shape[0] != 1:
        raise ExportError(
            "export needs a batch-1 example input (the DPU export traces batch size 1; public case "
            "P04), got "
            "shape %s; pass one sample of "
            "the same shape, for example batch[:1].clone()" % (tuple(example1.shape),))
    if example1.dtype != torch.float32 or not example1.is_contiguous():
        raise ExportError("export needs a contiguous float32 example input (the quantizer "
                          "boundary's owned copy), got dtype %s, contiguous=%s"
                          % (example1.dtype, example1.is_contiguous()))


def _build_model(gm: torch.fx.GraphModule, examples: Tuple[torch.Tensor, ...], flavour: str) -> Any:
    """The ONNX ``ModelProto`` of ``gm`` (checked with ``onnx.checker``); raises ExportError."""
    import onnx
    from onnx import TensorProto, helper

    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(examples):
        raise ExportError("export: the model takes %d inputs (%s), got %d example tensors"
                          % (len(placeholders), ", ".join(placeholders), len(examples)))
    try:
        meta1 = record(gm, [e.clone() for e in examples])
        meta2 = record(gm, [torch.cat([e, e], 0) for e in examples])  # finds the batch-dependent dims
    except Exception as exc:
        raise ExportError("the model failed on the batch-1 example input %s (and on a batch of two "
                          "copies of it): %s: %s" % (", ".join(str(tuple(e.shape)) for e in examples),
                                                     type(exc).__name__, exc)) from exc
    b = Builder(gm, FLAVOUR_CLASSES[flavour](), meta1, meta2)
    b.independent = independent_nodes(gm, meta1, meta2)
    b.folded = folded_values(gm, [e.clone() for e in examples], b.independent)
    # fx node names are identifiers and every other tensor name holds a '/' or a '.', so graph
    # input/output names only have to avoid the fx node names (a layer called `output`, say)
    taken = {n.name for n in gm.graph.nodes if n.op not in ("placeholder", "output")}
    for i, name in enumerate(placeholders):
        b.input_names[name] = _free_name(INPUT_NAME if len(placeholders) == 1 else "%s_%d" % (INPUT_NAME, i), taken)
    problems = []  # type: List[Tuple[str, str]]  # (node, why)
    output_node = None
    for node in gm.graph.nodes:
        if node.op == "output":
            output_node = node
            continue
        try:
            _emit(b, node)
        except Unsupported as exc:
            problems.append(("%s (op=%s, target=%s)" % (node.name, node.op, target_name(gm, node)), str(exc)))
            b.failed.add(node.name)
    outputs = []
    try:
        results = _outputs(output_node)
        for i, result in enumerate(results):
            name = _free_name("output" if len(results) == 1 else "output_%d" % i, taken)
            b.op("Identity", [b.tensor(result)], name)
            dims = [BATCH_DIM if d in b.batch_dims(result) else s
                    for d, s in enumerate(b.shape(result))]  # type: List[Any]
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, dims))
    except Unsupported as exc:
        problems.append(("output", str(exc)))
    if problems and all(where == "output" for where, _ in problems):  # what the model returns: no export takes it
        raise ExportError("cannot export the model to ONNX (%s flavour): %s. Return the tensors themselves (a tuple "
                          "instead of a dict): the xmodel, too, carries a tensor or a flat tuple/list of tensors"
                          % (flavour, problems[0][1]))
    if problems:
        listed = ""
        if any(why == NO_LOWERING for _, why in problems):  # the op list helps only for an op without one
            modules, functions, methods = supported()
            listed = ". Supported: fake_quant, modules %s, functions %s, methods %s" % (
                ", ".join(sorted(modules)), ", ".join(sorted(functions)), ", ".join(sorted(methods)))
        raise ExportError("cannot export the model to ONNX (%s flavour): %d node(s) are unsupported: %s. The "
                          "xmodel does not depend on the ONNX exports: drop onnx_%s from export.formats to go on "
                          "(with the drop-in API: do not call export_onnx_model), or write the call as one of "
                          "those supported%s" % (flavour, len(problems), _grouped(problems), flavour, listed))
    graph = helper.make_graph(
        b.nodes, "quantized_%s" % flavour,
        [helper.make_tensor_value_info(b.input_names[p], TensorProto.FLOAT, [BATCH_DIM] + list(e.shape[1:]))
         for p, e in zip(placeholders, examples)],
        outputs, initializer=list(b.initializers.values()))
    model = helper.make_model(graph, producer_name=PRODUCER_NAME, producer_version=__version__,
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    output_fix_pos = getattr(gm, "output_fix_pos", None)
    output_fix_pos = None if output_fix_pos is None else int(output_fix_pos)
    table = dict(b.fix_table, output_fix_pos=output_fix_pos)
    props = [("flavour", flavour), ("rounding", b.flavour.rounding), ("bias", b.flavour.bias),
             ("fix_pos", json.dumps(table, sort_keys=True)),
             ("output_fix_pos", json.dumps(output_fix_pos)),
             ("quant_info", json.dumps(getattr(gm, "quant_info", None), sort_keys=True, default=str))]
    for key, value in props:
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # onnx raises its own ValidationError / InferenceError
        raise ExportError("the written ONNX graph fails onnx.checker (%s flavour): %s; this is an "
                          "exporter bug, please report it with the model" % (flavour, exc)) from exc
    return model


def export_onnx(gm: torch.fx.GraphModule, example1: Any, out_path: str, flavour: str) -> str:
    """Write the lowered test-mode model ``gm`` as ONNX (opset 13) to ``out_path``; returns ``out_path``.

    Args:
        gm: the lowered test-mode model (module docstring: the contract it must follow). It is
            run twice on CPU under ``torch.no_grad`` (on the example and on two copies of it, to
            find which output dimensions follow the batch size); it is not modified.
        example1: float32, contiguous, batch-1 example input of one sample's shape, e.g. NCHW
            (1, C, H, W), or a tuple of them (one per model input). Never written (the runs use
            copies).
        out_path: destination file; written atomically (temporary name in the same folder, then
            ``os.replace``); the folder is created if missing.
        flavour: ``"exact"`` (bit-exact with the simulation, half_up ties toward +inf) or
            ``"qdq"`` (QuantizeLinear/DequantizeLinear; rounds half to even, so it can be 1 LSB
            off the DPU on ties at each quantization point).

    The file has input ``input`` (N, *example1.shape[1:]) float32 (``input_0``, ``input_1``, ...
    for several) with a dynamic batch dimension ``N``, output ``output`` (or ``output_<i>`` for several) float32, and the same bytes
    for the same graph and the same onnx version.

    Raises:
        ExportError: unknown flavour; example not batch 1 (public case P04), not float32 or not
            contiguous; the model fails on the example; unsupported nodes (all of them listed at
            once with name, op and target); weights off their 2^-fix_pos grid; qdq with a bit width
            above 8; a graph that fails ``onnx.checker``.
    """
    if flavour not in FLAVOURS:
        raise ExportError("ONNX flavour must be one of %s, got %r" % (FLAVOURS, flavour))
    examples = tuple(example1) if isinstance(example1, (tuple, list)) else (example1,)
    for e in examples:
        _check_example(e)
    model = _build_model(for_inputs(gm, examples), examples, flavour)  # the graph for its adaptive pools' sizes
    return write_bytes(out_path, model.SerializeToString(deterministic=True))
