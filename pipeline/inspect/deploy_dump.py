"""The real quantizer's deploy-check dumps made from ANY quantized xmodel and the interpreter's run of it
(``python -m pipeline xmodel run FILE --input X.npy --dump DIR``; docs/xmodel.md#check-and-run-any-xmodel).

``export_xmodel(deploy_check=True)`` (``quantizers/sim/xmodel/deploy_check.py``) writes, per tensor of the
deploy graph, ``<name>.bin`` (float32), ``<name>_fix.bin`` (the codes ``trunc(value * 2**fp)``) and
``shape.txt``. The xmodel keeps what those files need: every deploy-graph node is an op of the same
(sanitised) name, every quantized tensor is followed by a ``fix`` op named ``<producer>_fix`` with its
fix position, and every parameter is a ``const`` followed by its ``fix``. So, from the values of a run:

- a ``fix`` op of a ``const`` (a parameter): ``<const>.bin`` (the const's values, on their grid) and
  ``<fix>.bin`` (its codes);
- a ``fix`` op of any other op: ``<producer>.bin`` holds the fix's value (the quantized value, as the
  real dump's float file of a quantized node does) and ``<fix>.bin`` its codes;
- any other op that is not a ``const`` and has no ``fix``: ``<op>.bin``, its float value (a conv
  quantized only at its ReLU);
- a ``const`` without ``fix`` that a deploy-graph op reads (a float parameter: LayerScale's gamma in a
  ``mul``): ``<const>.bin``, its float value, as the real float pass dumps every parameter of every node
  (``DeployChecker._dump_floating_model``) and ``export_xmodel(deploy_check=True)`` does; the writer's own
  helper consts (a reshape's dims, read by a ``stack``; an average pool's or hard-sigmoid's factor,
  ``<node>_i<k>``) are no tensors of the deploy graph and are not written;
- ``shape.txt``: ``<dims>: <op name>`` for every op written (not the parameters), in the file's order.

Values are in the file's layout (NHWC for 4-D), as the real dumps are. What the real dumps hold and these
cannot (the nodes the xmodel does not keep, a batch norm's mean and var, the input quantizations
``_pre_fix_i<k>``) is listed in docs/xmodel.md#deploy-check-dumps.
"""
import os
import re
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pipeline.fileio import write_files

_PART = re.compile(r"^(.*)_(i\d+|mul)$")
HELPER_TYPES = ("const", "stack", "shape")  # helper ops of the writer: reshape dims, avg-pool factors


def _fix_of(graph: Any) -> Dict[str, Any]:
    """producer op name -> the ``fix`` op that quantizes it (the first, in file order)."""
    found = {}  # type: Dict[str, Any]
    for op in graph.ops:
        if op.type == "fix":
            src = op.inputs.get("input", [None])[0]
            if src is not None and src.name not in found:
                found[src.name] = op
    return found


def _macro_part(name: str, stems: set) -> bool:
    """An op the writer makes as a part of one node (``<node>_i<k>``: an average pool before its factor, a
    hard-sigmoid; ``<node>_mul``: Hardswish's quantized hard-sigmoid): not a node of the deploy graph, so
    not in the real dumps."""
    found = _PART.match(name)
    return found is not None and found.group(1) in stems


def _parameter(graph: Any, op: Any) -> bool:
    """A ``const`` some op other than a writer helper (``HELPER_TYPES``) reads: a parameter of a deploy-graph
    node (a float one, when it has no ``fix``), not a helper const of the writer."""
    return any(user.type not in HELPER_TYPES for user in graph.fanout(op))


def _stem(name: str) -> str:
    from pipeline.quantizers.sim.xmodel.deploy_check import file_stem
    return file_stem(name)


def dump_files(graph: Any, values: Dict[str, Any]) -> List[Tuple[str, bytes]]:
    """The deploy-check files of a run: ``[(file name, bytes)]``, ``shape.txt`` last.

    Args:
        graph: a checked xmodel graph (``reader.check``); values: op name -> its value from
            ``interp.run`` (the file's dims and layout).

    Raises:
        pipeline.errors.ExportError: a fix bit width the real dumps cannot hold (4, 8, 16 only).
    """
    from pipeline.quantizers.sim.xmodel.deploy_check import SHAPE_FILE, codes
    fixes = _fix_of(graph)
    files = OrderedDict()  # type: Dict[str, bytes]
    lines = []  # type: List[str]

    def put(name: str, data: bytes) -> None:
        files.pop(name, None)
        files[name] = data

    def floats(name: str) -> np.ndarray:
        return np.ascontiguousarray(values[name].detach().contiguous().numpy().astype("<f4"))

    stems = {_stem(op.name) for op in graph.ops}
    for op in graph.ops:
        if op.type == "fix" or _macro_part(_stem(op.name), stems):
            continue
        fix = fixes.get(op.name)
        if fix is None:
            if op.type in HELPER_TYPES and not (op.type == "const" and _parameter(graph, op)):
                continue
            put(_stem(op.name) + ".bin", floats(op.name).tobytes())
        else:
            value = floats(fix.name)
            put(_stem(op.name) + ".bin", value.tobytes())
            put(_stem(fix.name) + ".bin", codes(value, int(fix.attr("bit_width", 8)), int(fix.attr("fix_point"))))
        if op.type != "const":
            lines.append("%s: %s\n" % (list(op.shape), op.name))
    put(SHAPE_FILE, "".join(lines).encode("utf-8"))
    return list(files.items())


def write_dump(folder: str, graph: Any, values: Dict[str, Any]) -> Dict[str, Any]:
    """Write the deploy-check files of a run into ``folder`` (created; files of the same names replaced,
    all renamed into place together).

    Returns:
        ``{"folder", "files" (count), "tensors" (ops in shape.txt: not parameters), "parameters" (the
        parameters' float files: weights, biases), "codes" (``_fix.bin`` files, of tensors and parameters),
        "tensor_codes", "parameter_codes" (those two parts of "codes")}``.
    """
    items = dump_files(graph, values)
    os.makedirs(folder, exist_ok=True)
    write_files([(os.path.join(folder, name), data) for name, data in items])
    shape = items[-1][1].decode("utf-8").splitlines()
    fixes = _fix_of(graph)
    consts = [op for op in graph.ops if op.type == "const"]
    parameter_files = set(_stem(op.name) + ".bin" for op in consts)
    parameter_files |= set(_stem(fixes[op.name].name) + ".bin" for op in consts if op.name in fixes)
    codes = [name for name, _ in items if name.endswith("_fix.bin")]
    parameter_codes = sum(1 for name in codes if name in parameter_files)
    return {"folder": folder, "files": len(items), "tensors": len(shape),
            "parameters": sum(1 for name, _ in items if name in parameter_files and not name.endswith("_fix.bin")),
            "codes": len(codes), "tensor_codes": len(codes) - parameter_codes, "parameter_codes": parameter_codes}


def fix_position(graph: Any, name: str) -> Optional[Tuple[int, int]]:
    """``(fix_point, bit_width)`` of the ``fix`` op named ``name`` or quantizing the op ``name``, else None."""
    op = graph.get_op(name)
    if op is not None and op.type != "fix":
        op = _fix_of(graph).get(op.name)
    if op is None or op.type != "fix" or op.attr("fix_point") is None:
        return None
    return int(op.attr("fix_point")), int(op.attr("bit_width", 8))

