"""The xmodel piece of an op record (:class:`XmodelForm`) and the pure helpers the units' lowerings and
XIR creators share. A support module: it defines no RECORD.

A unit's lowering is called with the room's lowering context (``quantizers/sim/xmodel/lower.py``,
``_Lowering``) and its creator with the room's writer (``quantizers/sim/xmodel/convert.py``,
``_Writer``); both are handed over at call time, so no unit imports the room. The methods they use:

- lowering context ``lo``: ``lo.module(node)`` (the node's ``nn.Module``, None for a functional call),
  ``lo.call_args(node)`` (the call's arguments by name, defaults filled: ``OpRecord.signatures``),
  ``lo.value(arg)`` (an argument with traced sizes replaced by their values on the example),
  ``lo.shape_args(node)`` (the ints of a view/permute call), ``lo.values`` (fx node -> its value),
  ``lo.graph`` (the capture), ``lo.unsupported(node, why)`` (the error to raise for a form the xmodel
  cannot carry);
- writer ``w``: ``w.fixed_op(name, type, attrs, inputs)`` (an XIR op and its ``fix``),
  ``w.fixed_const(name, data)``, ``w.op_of(name)``, ``w.data_inputs(node)``, ``w.with_params(node,
  type, attrs)``, ``w.fix_op(op, bit_width, fix_pos)``, ``w.custom(node, attrs=None)`` (a custom op: a
  type XIR does not define; ``attrs``: the node's attributes its type writes), ``w.x`` (the ``XGraph``)
  and ``w.outputs`` (node name -> (bit_width, fix_pos)).
"""
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

from .record import Absent

INT_MAX = 2147483647  # nndct's NNDCT_CONSTANT.INT_MAX: an open slice end
PAD_MODES = {0: "FLOOR", 1: "CEIL", 2: "SAME", 3: "VALID"}  # nndct's pad_mode -> XIR's

Lowering = Callable[[Any, Any], Dict[str, Any]]  # (lowering context, SimNode) -> deploy attributes
Creator = Callable[[Any, Any], None]  # (writer, devgraph.Node) -> None; creates the node's XIR ops


@dataclass(frozen=True)
class XmodelForm:
    """How the xmodel writer carries one nndct op type (``OpRecord.xmodel``).

    Attributes:
        lower: ``lower(lo, node) -> attrs``: the nndct deploy-graph attributes of a capture node
            (``pytorch_nndct/parse/parser.py`` and the op's ``nndct_shared/nndct_graph`` attributes: kernel,
            stride, dilation as ``[w, h]``, pad as ``[left, right, top, bottom]``, ...); raises
            ``lo.unsupported(node, why)`` for a form the xmodel cannot carry.
        create: ``create(w, node)``: the XIR ops the real quantizer's ``xop_creator.py`` makes for a
            deploy-graph node of the type, in its order, through the writer's methods.
        nhwc: the type's XIR form is NHWC (an "implicit" op of nndct's ``layout_tranform``: convs, pools,
            resize, batch norm): the layout pass starts from it (``quantizers/sim/xmodel/layout.py``).
        layout_rewrite: ``rewrite(node, order)``: how a node of the type rewrites its attributes when it
            takes a layout ``order`` (``attr_transform.py``: an axis, a shape, a slice's dims); None when
            it has none to rewrite.
        weights: ``weights(module, w) -> w``: a layer's weights (float32 ndarray, the module's torch
            layout) in nndct's layout (``parser.py`` ``_load_data``: conv OHWI, ...); None: as torch holds
            them (linear ``[out, in]``, batch norm ``[C]``).
        const_weights: ``const_weights(w) -> w``: the weights as ``xop_creator.py`` writes them into their
            ``const`` op (a transposed conv's flipped in H and W); None: as the deploy graph holds them.
        traced_sizes: the type takes traced sizes as tensors (``cls.expand(x.shape[0], -1, -1)``): the
            ``nndct_shape`` nodes feeding it are written as ops of their own (their record's form) and are
            its inputs, where for any other type they are evaluated on the example and folded into its
            attributes (nndct keeps a size node whose consumer is no shape-folding op).
        param_operands: a parameter or buffer of the model may be an operand of the type (ConvNeXt's
            ``layer_scale * x``, the class token of ``cls.expand``, the table and the index buffer of
            ``table[idx]``): the writer binds it to the node as nndct's parser does (``_bind_free_params``;
            ``in_tensors`` without a producer node) and writes it as a ``const`` of its full name, in its own
            dtype (float; an index buffer int64) and without ``fix`` (its quant_info entry, where it has one,
            has no fix position), among the node's inputs at its argument position (``xop_creator.binary_op``
            takes a parameter tensor by its name; ``custom_xop`` writes every input tensor); False: the writer
            refuses such an operand.
    """
    lower: Lowering
    create: Creator
    nhwc: bool = False
    layout_rewrite: Optional[Callable[[Any, Sequence[int]], None]] = None
    weights: Optional[Callable[[Any, Any], Any]] = None
    const_weights: Optional[Callable[[Any], Any]] = None
    traced_sizes: bool = False
    param_operands: bool = False


XmodelPiece = Union[XmodelForm, Absent]


def no_attrs(lo: Any, node: Any) -> Dict[str, Any]:
    """The lowering of a type nndct gives no attributes."""
    return {}


def custom(w: Any, node: Any) -> None:
    """Written as a custom op (a type XIR does not define: its output ``shape`` and ``data_type``)."""
    w.custom(node)


def custom_with_attrs(w: Any, node: Any) -> None:
    """Written as a custom op carrying the node's deploy attributes (nndct's ``custom_xop`` writes every
    attribute of the op: ``nndct_log_softmax``'s ``axis``)."""
    w.custom(node, node.attrs)


def rewrite_axis(node: Any, order: Sequence[int]) -> None:
    """The ``axis`` attribute moved with the layout ``order`` (``attr_transform.py``)."""
    node.attrs["axis"] = list(order).index(node.attrs["axis"])


def simple(type_: str, keys: Tuple[str, ...] = ()) -> Creator:
    """The creator of one XIR op ``type_`` on the node's data inputs, with the node's attributes ``keys``."""
    def create(w: Any, node: Any) -> None:
        attrs = {k: node.attrs[k] for k in keys} or None
        w.fixed_op(node.name, type_, attrs, {"input": w.data_inputs(node)})
    return create


def mixed_index_reason(index: tuple, item: Any, rank: Optional[int] = None) -> str:
    """The xmodel writer's reason for ``x[index]`` (an int or None ``item`` among slices; ``rank``: the indexed
    tensor's) not being written, with the workaround (``ops/slicing``'s strided slice). Capture splits a
    getitem into the selects, unsqueezes and slice chains torch.jit records (``pipeline/fx/jit_index.py``);
    what it leaves with an Ellipsis is a chain of slices split by it after an int or None
    (``x[:, None, 2:6, ..., 0:4]``: ``aten::slice`` of dims 2 and 4), which nndct's parser merges into one
    strided slice (``OptPass.slice_to_strided_slice``) and its forward runs on consecutive dimensions from the
    chain's first (``pytorch_nndct.nn.modules.prim_ops``, ``deephi_StridedSlice.forward``: dims 2 and 3), a
    tensor of other values or shape: not supported by the real quantizer either (*measured*: the real
    quantizer's calibration failed at the next layer's shape: tests/data/refused_real/ellipsis_split_index);
    the simulation's capture refuses it before calibration (``pipeline/fx/jit_index.py``, ``split_chain``), so
    this reason is met where the capture takes the model as written. The same index with the Ellipsis written as
    the full slices it stands for is one chain of consecutive dimensions, which is written. Any other index
    left (no Ellipsis): one getitem per run of slices then ints and None, each later one led by ``:`` for
    the dims before it."""
    if Ellipsis in index and rank is not None:
        at = index.index(Ellipsis)
        full = index[:at] + (slice(None),) * (rank - sum(a is not None for a in index) + 1) + index[at + 1:]
        texts = _index_text(index), _index_text(full)
        split = "x[%s] for x[%s]" % (texts[1], texts[0]) if None not in texts else "e.g. x[:, None, 2:6, :, 0:4] " \
            "for x[:, None, 2:6, ..., 0:4]"
        return ("indexing with %r and slices after it, split by an Ellipsis: torch.jit records one chain of "
                "slices on dimensions that are not consecutive, which the real quantizer runs on consecutive "
                "dimensions from the chain's first (its strided slice's forward), giving another tensor: not "
                "supported by the real quantizer either. Write the dimensions the Ellipsis stands for as full "
                "slices: %s, which is written and gives the same values" % (item, split))
    steps = _index_steps(index) if Ellipsis not in index else None
    texts = [_index_text(i) for i in [index] + (steps or [])]
    split = "%s for x[%s]" % ("x" + "".join("[%s]" % t for t in texts[1:]), texts[0]) \
        if steps and None not in texts else "e.g. x[:, 0][:, 3:4] for x[:, 0, 3:4]"
    return ("indexing with %r and slices after it: this writer has no form yet for a slice after an int or "
            "None in one index (the real quantizer writes a select or unsqueeze, then a slice of the "
            "dimensions after it). Index in steps, no slice after an int or None in each: %s, which is "
            "written and gives the same values" % (item, split))


def _index_steps(index: tuple) -> list:
    """``index`` cut before each slice that follows an int or None, its full trailing slices dropped; each
    later step led by ``:`` for the dimensions the steps before it leave (a slice or None leaves one)."""
    items = list(index)
    while items and items[-1] == slice(None):
        items.pop()
    steps, left = [], 0  # type: list, int
    for i, a in enumerate(items):
        if not steps or (isinstance(a, slice) and not isinstance(items[i - 1], slice)):
            steps.append((slice(None),) * left)
        steps[-1] += (a,)
        left += 0 if type(a) is int else 1
    return steps


def _index_text(index: tuple) -> Any:
    """``index`` as Python writes it (``:, 0, 3:4``); None when an item is not a constant int or slice."""
    parts = []
    for i in index:
        if i is Ellipsis:
            parts.append("...")
            continue
        bounds = (i.start, i.stop, i.step) if isinstance(i, slice) else (i,)
        if not all(v is None or type(v) is int for v in bounds):
            return None
        parts.append(":".join("" if v is None else str(v) for v in bounds[:2 if bounds[2:] == (None,) else 3])
                     if isinstance(i, slice) else str(i))
    return ", ".join(parts)
