"""The real quantizer's deploy-check dumps, ``export_xmodel(deploy_check=True)`` (docs/xmodel.md#deploy-check-dumps).

With ``deploy_check=True`` nndct's ``dump_xmodel`` (``pytorch_nndct/qproc/base.py``) hands its deploy
graph to a ``DeployChecker`` (``nndct_shared/compile/deploy_checker.py``) before it writes the xmodel.
The checker writes, under ``<output_dir>/deploy_check_data_int/<Model>/``, one raw file per tensor of
the deploy graph with the values of the first (batch-1) test-mode forward:

- ``<name>.bin``: float32, for every node's first output and every parameter (``float`` pass);
- ``<name>_fix.bin``: the fixed-point codes (int8; int16 for 16 bits; 4-bit codes packed two to a
  byte), for every output and parameter with a fix position (``fixed`` pass), no fix position in
  the file;
- ``<name>_pre_fix_i<k>.bin``: the codes of input ``k`` of a node with an input quantization;
- ``shape.txt``: ``<shape>: <node name>`` per node, the deploy graph's order (NHWC shapes).

``<name>`` is the nndct node or parameter name with every character other than ``[0-9A-Za-z]``
replaced by ``_``. The values are those of the deploy graph: NHWC, conv weights OHWI, the
parameters as the test-mode model holds them (on their grid). A code is ``trunc(value * 2**fp)``
(the value is already on its grid) except for an output whose entry the exporter moved up to a
parent (a fused pad): that value is quantized first, half up, clamped to the code range.

:func:`dump_files` builds the same deploy graph the xmodel writer builds (``writer.build``) but
with the test-mode model's values on each node and returns the files as ``(relative path, bytes)``;
the caller writes them together with the xmodel (``write_xmodel(..., extra_files=...)``).
"""
import re
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ....errors import ExportError
from .... import ops as t
from . import deploy
from .devgraph import Graph, Tensor
from .lower import _Lowering, record_values

FOLDER = "deploy_check_data_int"
FIX_SUFFIX = "_fix"
PRE_FIX_SUFFIX = "_pre_fix"
SHAPE_FILE = "shape.txt"

_NOT_NAME = re.compile(r"[^0-9A-Za-z]")
_NOT_FOLDER = re.compile(r"[^0-9A-Za-z/]")


def file_stem(name: str) -> str:
    """nndct's file name for a tensor name (``DeployChecker.dump_tensor_to_file``)."""
    return _NOT_NAME.sub("_", name)


def folder_name(graph_name: str) -> str:
    """The sub-folder of ``deploy_check_data_int`` for a graph (``DeployChecker.update_dump_folder``)."""
    return _NOT_FOLDER.sub("_", graph_name)


def codes(data: np.ndarray, bit_width: int, fix_pos: int) -> bytes:
    """The fixed-point file of ``data`` (already on its grid): ``trunc(data * 2**fix_pos)`` as int8
    (int16 for 16 bits; 4 bits: int8 codes packed two to a byte, high nibble first), nndct's
    ``quantize_data2int`` with its default ``round_method`` (2) and ``compact_low_bit_data_to_8_bit``."""
    if bit_width not in (4, 8, 16):
        raise ExportError("export_xmodel(deploy_check=True): a %d-bit tensor; the real quantizer writes check data "
                          "for 4, 8 and 16 bits only (it fails with 'unexpected max'); nothing was written" % bit_width)
    flat = np.asarray(data).reshape(-1)
    scaled = flat * (2 ** fix_pos if fix_pos >= 0 else 2.0 ** fix_pos)
    ints = scaled.astype(np.int16 if bit_width == 16 else np.int8)
    if bit_width == 4:
        high, low = ints[::2], ints[1::2]
        if len(high) > len(low):
            low = np.append(low, 0).astype(np.int8)
        ints = np.bitwise_or(np.left_shift(high, 4), np.bitwise_and(low, 15)).astype(np.int8)
    return ints.astype(ints.dtype.newbyteorder("<")).tobytes()


def _requantize(data: np.ndarray, bit_width: int, fix_pos: int) -> np.ndarray:
    """nndct's ``quant_data_for_dump`` for an entry moved up to a parent: scale, clamp to the code
    range, round half up, scale back (``normal_quant_neuron`` with ``round_method=-1``)."""
    bound = 2 ** (bit_width - 1)
    amp = 2 ** fix_pos if fix_pos >= 0 else 2.0 ** fix_pos
    scaled = np.clip(np.asarray(data, np.float32).reshape(-1) * amp, -bound, bound - 1).astype(np.float64)
    rounded = np.floor(scaled + 0.5)
    negative = scaled < 0
    ties = negative & (scaled - np.floor(scaled) == 0.5)
    rounded[negative] = np.ceil(scaled[negative] - 0.5)
    rounded[ties] = np.ceil(scaled[ties])
    rounded += 0.0  # nndct rounds with Python's math (integers): no negative zero
    return (rounded / amp).reshape(np.shape(data))


def _floats(data: np.ndarray) -> bytes:
    return np.ascontiguousarray(np.asarray(data).astype("<f4")).reshape(-1).tobytes()


def _test_values(graph: Any, lowered: torch.fx.GraphModule, examples: Sequence[torch.Tensor]) -> Dict[Any, Any]:
    """The value of each capture node (keyed by the capture's fx node) as the test-mode model has it
    on ``examples``: after the node's output quantization where it has one (nndct records a module's
    output after its fix), the float result where it has none; shape arithmetic from the float run."""
    from .verify import record
    values = record_values(graph, examples)
    _, test = record(lowered, examples)
    last = {}  # type: Dict[str, Any]
    for fx_node, value in test.items():
        tagged = fx_node.meta.get("nndct_node")
        if tagged is not None:
            last[tagged] = value
        elif fx_node.name in graph.by_name and fx_node.name not in last:
            last[fx_node.name] = value
    for node in graph.nodes:
        value = last.get(node.name)
        if isinstance(value, torch.Tensor) and node.fx_node is not None and node.op != t.CONST:
            values[node.fx_node] = value.detach()
    return values


def _tables(session: Any, dev: Graph, info: Dict[str, Any], names: Dict[str, str]) -> Tuple[
        Dict[str, Tuple[int, int]], Dict[str, Tuple[int, int]], set, Dict[str, List[Optional[Tuple[int, int]]]]]:
    """``(params, outputs, moved, inputs)``: the fix tables the xmodel writer uses (``writer._fix_tables``),
    the deploy names whose output entry was moved up from a node the deploy graph lost, and the
    input entries of quant_info by deploy name."""
    from .writer import _fix_tables
    params, outputs = _fix_tables(session, dev, info, names)
    prefix = session.graph.class_name + "::"
    direct = set()
    for key, value in info["output"].items():
        sim = key[len(prefix):] if key.startswith(prefix) else None
        if sim in names and names[sim] in dev and value and value[0][0] is not None:
            direct.add(names[sim])
    moved = {name for name in outputs if name not in direct and not _group_member(session, dev, name, names)}
    inputs = {}  # type: Dict[str, List[Optional[Tuple[int, int]]]]
    for key, value in (info.get("input") or {}).items():
        sim = key[len(prefix):] if key.startswith(prefix) else None
        if sim in names and names[sim] in dev and value:
            inputs[names[sim]] = [None if v is None or v[0] is None or v[1] is None else (int(v[0]), int(v[1]))
                                  for v in value]
    return params, outputs, moved, inputs


def _group_member(session: Any, dev: Graph, name: str, names: Dict[str, str]) -> bool:
    """A Hardswish that took its group's entry (``FixPosInserter`` writes it into the quantizer's own
    config, so nndct does not treat it as moved)."""
    by_deploy = {v: k for k, v in names.items()}
    sim = by_deploy.get(name)
    return sim is not None and session.graph.by_name[sim].op == t.HSWISH


def _add_bn_statistics(dev: Graph, lowered: torch.fx.GraphModule, names: Dict[str, str]) -> None:
    """A batch norm the deploy graph keeps (one that follows no conv) has four parameters in nndct:
    ``weights``, ``bias``, then ``mean`` and ``var`` (``<path>.running_mean``/``running_var``) as the
    test-mode model holds them; the xmodel writer needs the first two only, the dumps all four."""
    by_deploy = {v: k for k, v in names.items()}
    for node in dev.nodes:
        weights = node.params.get("weights")
        if node.type != t.BATCH_NORM or weights is None or not weights.name.endswith(".weight"):
            continue
        module = lowered.get_submodule(by_deploy[node.name])
        base = weights.name[:-len("weight")]
        for kind, buffer in (("mean", "running_mean"), ("var", "running_var")):
            value = getattr(module, buffer, None)
            if isinstance(value, torch.Tensor):
                node.params[kind] = Tensor(base + buffer)
                node.params[kind].from_ndarray(value.detach().float().numpy().copy())


def dump_files(session: Any, lowered: torch.fx.GraphModule, examples: Sequence[torch.Tensor]) -> List[Tuple[str, bytes]]:
    """The deploy-check files for the sim's test-mode model on the batch-1 ``examples``: ``(path
    relative to the export folder, bytes)``, in the order nndct writes them (a later file of the same
    name replaces an earlier one there, so it does here), ``shape.txt`` last.

    Raises:
        lower.XmodelUnsupported: a node the xmodel cannot carry (the dumps need its deploy graph).
        ExportError: a bit width the real quantizer cannot dump.
    """
    from ....fx.rewrites import swap_modules
    from ....fx.work_copy import work_copy
    from .names import node_names
    graph = session.graph
    swapped = work_copy(session.model)
    swap_modules(swapped, session.cfg.rewrites())
    examples = tuple(e.detach().cpu().float().clone() for e in examples)
    names = node_names(graph, swapped, examples)
    dev = _Lowering(graph, lowered, names, _test_values(graph, lowered, examples)).build()
    deploy.optimize(dev)
    params, outputs, moved, inputs = _tables(session, dev, lowered.quant_info, names)
    for name in moved:  # quant_data_for_dump
        node = dev.node(name)
        if node.out_tensors and node.out.data is not None:
            bits, pos = outputs[name]
            node.out.from_ndarray(_requantize(node.out.data, bits, pos))
    base = FOLDER + "/" + folder_name(dev.name) + "/"
    files = OrderedDict()  # type: Dict[str, bytes]

    def put(stem: str, data: bytes) -> None:
        path = base + file_stem(stem) + ".bin"
        files.pop(path, None)
        files[path] = data

    _add_bn_statistics(dev, lowered, names)
    nodes = list(reversed(dev.nodes))
    for node in nodes:  # _dump_floating_model
        for tensor in node.params.values():
            if tensor.data is not None:
                put(tensor.name, _floats(tensor.data))
        if node.out_tensors and node.out.data is not None:
            put(node.name, _floats(node.out.data))
    for node in nodes:  # _dump_fixed_model
        for tensor in node.params.values():
            if tensor.name in params and tensor.data is not None:
                put(tensor.name + FIX_SUFFIX, codes(tensor.data, *params[tensor.name]))
        if node.name in outputs and node.out_tensors and node.out.data is not None:
            put(node.name + FIX_SUFFIX, codes(node.out.data, *outputs[node.name]))
        for idx, entry in enumerate(inputs.get(node.name, [])):
            if entry is not None and idx < len(node.in_tensors) and node.in_tensors[idx].data is not None:
                put(node.name + PRE_FIX_SUFFIX + "_i%d" % idx, codes(node.in_tensors[idx].data, *entry))
    lines = ["%s: %s\n" % (list(tensor.shape), node.name) for node in dev.nodes for tensor in node.out_tensors
             if tensor.shape is not None]
    files[base + SHAPE_FILE] = "".join(lines).encode("utf-8")
    return list(files.items())
