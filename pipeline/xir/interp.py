"""Run an XIR graph (an :class:`xgraph.XGraph`: the writer's, or a file rebuilt by ``reader.check``) on
the CPU with torch, bit for bit as the simulation's test-mode model computes it.

Layout. Every value is a float32 tensor of the file's dims (the file's layout: a 4-D feature map
is NHWC). Where the simulation holds the same values in NCHW memory, the interpreter keeps that
memory and hands out an NHWC *view* of it (``permute(0, 2, 3, 1)``): a 4-D data op's input is the
caller's NCHW tensor seen as NHWC, and convolutions, pools and resizes run on NCHW tensors, as the
simulation does, and return NHWC views of their NCHW results. Element-wise torch ops on such views
run over the memory in the same order as on the simulation's tensors, and the layout-sensitive ops
(softmax, reductions, ``scale``) run on the NCHW tensor, with the axis mapped. So every op is the
same torch call on the same memory layout as in the simulation, which makes the results equal bit
for bit (the sums of convolutions and matmuls of values on fix-point grids are moreover exact in
float32 in any order for these sizes; see :func:`run` for the limits).

The semantics of each op type are in ``interp_ops`` (its table ``OPS``); the values' layout
helpers and the interpreter's error in ``interp_base``.

``verify.compare`` runs a graph against the simulation (the writer's self-check), with the custom
ops' functions taken from the simulation's test-mode model.
"""
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from .interp_base import TO_NCHW, TO_NHWC, FloatOp, InterpreterError, Run, checked, op_error
from .interp_ops import OPS, custom_op, is_custom
from .xgraph import XGraph, XOp

NCW_NWC = (0, 2, 1)  # a 3-D feature map's order in the file (nndct's swim and sink order of rank 3: its own inverse)

_INPUT_NAME = re.compile(r"input_(\d+)$")


def data_ops(graph: XGraph) -> List[XOp]:
    """The data ops in model argument order: by the ``input_<k>`` suffix nndct names them with
    (``<Class>__input_0``, ...) when every data op has a distinct one, else in creation order."""
    ops = [op for op in graph.ops if op.type == "data"]
    keys = [_INPUT_NAME.search(op.name) for op in ops]
    if all(keys) and len({int(k.group(1)) for k in keys}) == len(ops):
        return [op for _, op in sorted(zip([int(k.group(1)) for k in keys], ops), key=lambda p: p[0])]
    return ops


def _laid_out(op: XOp, x: torch.Tensor) -> torch.Tensor:
    """The caller's input as the data op's dims say: a 4-D NCHW tensor seen as NHWC (a view of its
    contiguous memory), else as given, else a 3-D NCW tensor seen as NWC (a 1-D conv's input: nndct lays a
    3-D feature map out only where a 1-D op takes it, so the given order is read first)."""
    x = x.detach()
    x = x if x.dtype == torch.float32 else x.float()
    dims = list(op.shape)
    if x.dim() == 4 and list(x.permute(TO_NHWC).shape) == dims:
        return x.contiguous().permute(TO_NHWC)
    if list(x.shape) == dims:
        return x
    if x.dim() == 3 and list(x.permute(NCW_NWC).shape) == dims:
        return x.contiguous().permute(NCW_NWC)
    raise op_error(op, "input of dims %s does not fit the data op's %s (NHWC for a 4-D NCHW input; batch %d)"
                   % (list(x.shape), dims, dims[0] if dims else 0))


def run(graph: XGraph, inputs: Union[Sequence[torch.Tensor], Mapping[str, torch.Tensor]],
        float_ops: Optional[Mapping[str, FloatOp]] = None) -> Dict[str, torch.Tensor]:
    """Run every op of ``graph`` in creation order (a topological order).

    Args:
        graph: an XGraph (``writer.build_xgraph``, or ``reader.check`` of a file).
        inputs: one tensor per data op, in model argument order (see :func:`data_ops`), as the model
            takes them: NCHW for a 4-D input whose data op is NHWC; or a mapping data op name ->
            tensor. Batch and sizes must be the data ops' (batch 1 as the quantizer writes them);
            converted to float32 if needed; never modified.
        float_ops: custom op name -> callable taking the op's input tensors (a list, in the file's
            layout: for the custom ops nndct wraps in transposes, the model's layout) and returning
            its output in the file's layout (see :func:`float_ops_from_sim`).

    Returns:
        op name -> float32 output of the file's dims and layout (a 4-D NHWC output may be a view of
        NCHW memory; call ``.contiguous()`` for NHWC memory), for every op.

    Raises:
        InterpreterError: inputs that do not fit the data ops, an op type or case not covered, a
            custom op without ``float_ops`` entry or built-in, or an op that fails (named).

    Bit-exactness: every op is the simulation's torch call on the simulation's memory layout, so the
    results equal the simulation's wherever the file's op is the model's op. Where the file's form
    differs (a pad folded into a conv, a Linear whose weights nndct reordered for an NHWC flatten,
    an adaptive pool written as a plain one), the sums of fix-point values are still exact in
    float32 whatever the summation order while each output sums fewer than
    ``2**24 / 2**14 = 1024`` products of 8-bit codes in the worst case (typical values allow far
    more); beyond that, the CPU kernel's summation order could change a last bit.
    """
    state = Run(dict(float_ops or {}))
    datas = data_ops(graph)
    if isinstance(inputs, Mapping):
        missing = [op.name for op in datas if op.name not in inputs]
        if missing or len(inputs) != len(datas):
            raise InterpreterError("xmodel interpreter: inputs for %s given, the data ops are %s"
                                   % (sorted(inputs), [op.name for op in datas]))
        given = {op.name: inputs[op.name] for op in datas}
    else:
        if len(inputs) != len(datas):
            raise InterpreterError("xmodel interpreter: %d inputs given, the graph has %d data ops (%s)"
                                   % (len(inputs), len(datas), ", ".join(op.name for op in datas)))
        given = {op.name: x for op, x in zip(datas, inputs)}
    with torch.no_grad():
        for op in graph.ops:
            if op.type == "data":
                state.values[op.name] = _laid_out(op, given[op.name])
                continue
            fn = custom_op if is_custom(op.type) else OPS.get(op.type)
            if fn is None:
                raise op_error(op, "op type not covered by the interpreter")
            ins = {arg: [state.values[i.name] for i in ops] for arg, ops in op.inputs.items()}
            try:
                value = fn(state, op, ins)
            except InterpreterError:
                raise
            except (RuntimeError, ValueError, TypeError, IndexError) as e:
                raise op_error(op, "failed: %s" % e) from e
            state.values[op.name] = checked(op, value)
    return state.values


def outputs(graph: XGraph) -> List[str]:
    """The names of the ops no op takes as input (the graph's outputs), in creation order (for a
    graph from ``reader.check``, the file's order)."""
    return [op.name for op in graph.ops if not graph.fanout(op)]


def to_model_layout(x: torch.Tensor) -> torch.Tensor:
    """A value in the model's layout: a 4-D NHWC value as NCHW (a view), anything else as is. (The
    file does not say which axis order a 4-D output had in the model; nndct writes 4-D feature maps
    NHWC.)"""
    return x.permute(TO_NCHW) if x.dim() == 4 else x


def model_readings(x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """``x`` as it is in the file and in the model's layout where nndct lays a feature map of its rank out:
    a 4-D value NHWC -> NCHW (:func:`to_model_layout`), a 3-D one NWC -> NCW (a 1-D conv's); views."""
    if x.dim() == 3:
        return x, x.permute(NCW_NWC)
    return x, to_model_layout(x)


def fit_layout(x: torch.Tensor, shape: Sequence[int]) -> Optional[torch.Tensor]:
    """``x`` read in the layout that gives the model's ``shape``: a 4-D value as NCHW from NHWC
    (:func:`to_model_layout`, nndct's usual end) or as it is (a file that ends in a transpose back
    to NCHW, or in an op that keeps torch's layout), or a 3-D value as NCW from NWC (a 1-D conv's); None when
    no reading fits."""
    for value in (to_model_layout(x), x) + ((x.permute(NCW_NWC),) if x.dim() == 3 else ()):
        if list(value.shape) == list(shape):
            return value
    return None


def by_shape(graph: XGraph, results: Mapping[str, torch.Tensor],
             shapes: Sequence[Sequence[int]]) -> List[Tuple[str, torch.Tensor]]:
    """(op name, value as it is in the file) of the output fitting each shape (:func:`fit_layout`)."""
    names = outputs(graph)
    free = list(range(len(names)))
    ordered = []  # type: List[Tuple[str, torch.Tensor]]
    for shape in shapes:
        match = next((i for i in free if fit_layout(results[names[i]], shape) is not None), None)
        if match is None:
            raise InterpreterError("xmodel interpreter: no output of dims %s among %s"
                                   % (list(shape), [list(results[names[i]].shape) for i in free]))
        free.remove(match)
        ordered.append((names[match], results[names[match]]))
    return ordered


def model_outputs(graph: XGraph, results: Mapping[str, torch.Tensor],
                  shapes: Optional[Sequence[Sequence[int]]] = None) -> List[torch.Tensor]:
    """The graph's outputs (:func:`outputs`) in the model's layout.

    Args:
        graph, results: the graph and what :func:`run` returned for it.
        shapes: the model's output shapes, in the model's order. Given, each is matched to the first
            not yet matched output that fits it (:func:`fit_layout`; the file lists outputs in its own
            order: Detect's second head comes first), and the outputs come back in the model's order.
            Not given, every 4-D output is taken as NHWC (:func:`to_model_layout`).

    Raises:
        InterpreterError: ``shapes`` has a shape no remaining output fits.
    """
    if shapes is None:
        return [to_model_layout(results[name]) for name in outputs(graph)]
    return [fit_layout(value, shape) for (_, value), shape in zip(by_shape(graph, results, shapes), shapes)]
