"""``Compose``: runs the stages in order on a batch and enforces the view contract on every one.

``Compose(batch)`` checks, after every stage: the output is a view of its input (else a contract
violation naming the stage and the bytes it allocated), has the planned shape and dtype, and the
batch's ``_version`` counter (shared by all views of one storage) did not move (an in-place write).
The stages deferred to the boundary (``pipeline.stages.gathers``) are identities here; their
composed channel order is ``Compose.boundary_channel_order``.
"""
from typing import Any, Dict, List, Optional, Sequence

import torch

from ..errors import ConfigError, StageError
from ..specs import TENSOR_LAYOUTS
from ..ledger import Ledger
from ..tensors import byte_extent, is_view_of, storage_nbytes
from .base import Shape, Stage
from .gathers import Pending, track_gathers


class Compose:
    """Runs stages in order on a batch and verifies the view contract after each one.

    The full check (storage, extent, shape, dtype, ``_version``) runs for the first batch of each
    (shape, strides, dtype); later batches of that geometry are compared with what it proved (each
    output's shape, strides, dtype and address relative to the batch, and the batch's ``_version``),
    a few integer comparisons per stage, and any difference runs the full check again.

    Args:
        stages: the stages, in order.
        source_layout: ``NHWC``/``NCHW`` of the source (needed only with ``source_channel_order``).
        source_channel_order: a channel order the source itself defers (a numpy source flipped with
            ``a[..., ::-1]``: see ``pipeline.data.memory.ArraySource.channel_order``), or None.

    Attributes:
        boundary_channel_order: None, or the list ``order`` such that output channel ``c`` of the
            quantizer boundary reads channel ``order[c]`` of the view ``Compose`` returns (axis 1).
        runs_at_boundary: per stage, True when it is deferred to the boundary.

    Raises:
        ConfigError: at construction, when a deferred channel order cannot reach the boundary's
            channel axis (a later stage slices or merges that axis, or the view is not 4-D NCHW).
    """

    def __init__(self, stages: Sequence[Stage], source_layout: Optional[str] = None,
                 source_channel_order: Optional[Sequence[int]] = None) -> None:
        self.stages = tuple(stages)
        self.source_channel_order = None if source_channel_order is None else tuple(source_channel_order)
        self.source_layout = source_layout
        self._plans = {}  # type: Dict[Shape, List[Shape]]
        # (shape, strides, dtype) of a batch -> per stage (shape, strides, dtype, address - batch address)
        self._proven = {}  # type: Dict[Any, List[Any]]
        source = None
        if self.source_channel_order is not None:
            if source_layout not in TENSOR_LAYOUTS:
                raise ConfigError("a source channel order needs the source layout NHWC or NCHW, got %r" % source_layout)
            source = Pending(source_layout.index("C"), self.source_channel_order,
                             "the source (a negative stride on its channel axis)")
        self.runs_at_boundary, pending = track_gathers(self.stages, source)
        self._notes = tuple("carried out inside the quantizer boundary's pass" if d else "" for d in self.runs_at_boundary)
        self.boundary_channel_order = None if pending is None else list(pending.index)

    PROVEN_CAPACITY = 16  # geometries remembered (a last, shorter batch adds one)

    def __len__(self) -> int:
        return len(self.stages)

    # ------------------------------------------------------------------ shapes
    def _stage_error(self, i: int, shape: Shape, exc: Exception, dtype: Any = None) -> StageError:
        return StageError("stage %d %r (input shape %s%s): %s" % (
            i, self.stages[i].name, tuple(shape), "" if dtype is None else ", dtype %s" % dtype, exc))

    def plan(self, shape: Sequence[int]) -> List[Shape]:
        """The shape of the view after each stage (deferred stages keep their input shape: they are
        carried out by the boundary). Pure; cached per input shape. Raises StageError naming the stage."""
        shape = tuple(int(s) for s in shape)
        if shape in self._plans:
            return self._plans[shape]
        if self.source_channel_order is not None:
            axis = self.source_layout.index("C")
            if len(shape) != 4 or shape[axis] != len(self.source_channel_order):
                raise StageError("the source's channel order %s needs a 4-D %s batch with %d channels, got %s"
                                 % (list(self.source_channel_order), self.source_layout,
                                    len(self.source_channel_order), shape))
        out, cur = [], shape
        checked = self.source_channel_order is not None  # the first deferred gather checks its indices
        for i, st in enumerate(self.stages):
            deferred = self.runs_at_boundary[i]
            if deferred and checked:
                out.append(cur)  # later gathers were composed (and checked) at construction
                continue
            try:
                nxt = st.output_shape(cur)
            except StageError as exc:
                raise self._stage_error(i, cur, exc)
            if deferred:
                checked, nxt = True, cur  # the boundary gathers; the view keeps its channels
            out.append(nxt)
            cur = nxt
        self._plans[shape] = out
        return out

    def output_shape(self, shape: Sequence[int]) -> Shape:
        """The shape the quantizer boundary will produce from a batch of ``shape`` (pure): the last
        view's shape with axis 1 set to ``len(boundary_channel_order)`` when an order is deferred."""
        shape = tuple(int(s) for s in shape)
        final = self.plan(shape)[-1] if self.stages else shape
        if self.boundary_channel_order is None:
            return final
        return final[:1] + (len(self.boundary_channel_order),) + final[2:]

    # ------------------------------------------------------------------ running
    def __call__(self, batch: torch.Tensor, ledger: Optional[Ledger] = None, batch_index: int = 0,
                 channel_order: Optional[Sequence[int]] = None) -> torch.Tensor:
        """Apply every stage to ``batch`` and return the final view (same storage as ``batch``).

        Args:
            batch: a torch tensor (any strides), e.g. the ``view`` of a ``pipeline.data.base.Batch``.
            ledger: when given, each stage's output is counted (view or copy, bytes allocated).
            batch_index: the batch number recorded in the ledger.
            channel_order: the channel order the batch's source defers to the boundary (the batch's
                ``channel_order``: a numpy source flipped with ``a[..., ::-1]``), or None.

        Raises:
            StageError: a stage rejects the input (names the stage, shape, dtype), or breaks the
                contract: its output is not a view of its input (it allocated), has another shape or
                dtype than planned, or a write changed the batch's ``_version``; or the batch comes from
                a source with a flipped channel axis (``channel_order`` given) that these stages were
                not built for.
        """
        if not isinstance(batch, torch.Tensor):
            raise StageError("Compose expects a torch.Tensor batch (see pipeline.data.batching.iter_batches), got %s"
                             % type(batch).__name__)
        if self.source_channel_order is None and channel_order is not None:
            raise StageError("this batch comes from a source whose channel axis is flipped (negative stride, e.g. "
                             "a[..., ::-1]); its channel order %s is carried out at the boundary, so build the "
                             "stages with build_stages(specs, source=source)" % list(channel_order))
        key = (batch.shape, batch.stride(), batch.dtype)
        proven = self._proven.get(key)
        if proven is None:
            return self._run_checked(batch, key, ledger, batch_index)
        # Proven geometry: each output must have the shape, strides, dtype and address (relative to
        # the batch's first element) that the full check proved a view lying inside the batch. A
        # copy cannot sit at an address of the live batch, so any allocation fails this comparison
        # and goes through the full check, which names it.
        base, version, x = batch.data_ptr(), batch._version, batch
        for i, st in enumerate(self.stages):
            y = x if self.runs_at_boundary[i] else self._apply(i, st, x)
            if (not isinstance(y, torch.Tensor) or (y.shape, y.stride(), y.dtype, y.data_ptr() - base) != proven[i]
                    or batch._version != version):
                self._check_stage(i, st, x, y, self.plan(batch.shape)[i], batch, version, ledger, batch_index)
            elif ledger is not None:
                ledger.add(st.name, True, 0, None, None, batch=batch_index, stage_index=i,
                           deferred=self.runs_at_boundary[i], note=self._notes[i])
            x = y
        return x

    def _apply(self, i: int, st: Stage, x: torch.Tensor) -> Any:
        try:
            return st.apply(x)
        except StageError as exc:
            raise self._stage_error(i, x.shape, exc, x.dtype)
        except RuntimeError as exc:
            raise self._stage_error(i, x.shape, StageError("torch refused the view: %s" % exc), x.dtype)

    def _run_checked(self, batch: torch.Tensor, key: Any, ledger: Optional[Ledger], batch_index: int) -> torch.Tensor:
        """The full contract check after every stage; remembers the proven geometry under ``key``
        when every output lies inside the batch's own extent (then any batch of the same shape,
        strides and dtype gives views inside its storage at the same relative addresses)."""
        shapes = self.plan(batch.shape)
        version, base = batch._version, batch.data_ptr()
        lo, hi = byte_extent(batch)
        x, proven = batch, []
        for i, st in enumerate(self.stages):
            y = x if self.runs_at_boundary[i] else self._apply(i, st, x)
            self._check_stage(i, st, x, y, shapes[i], batch, version, ledger, batch_index)
            y_lo, y_hi = byte_extent(y)
            proven.append((y.shape, y.stride(), y.dtype, y.data_ptr() - base) if lo <= y_lo and y_hi <= hi else None)
            x = y
        if len(self._proven) >= self.PROVEN_CAPACITY:
            self._proven.clear()
        if all(p is not None for p in proven):
            self._proven[key] = proven
        return x

    def _check_stage(self, i: int, st: Stage, x: torch.Tensor, y: Any, shape: Shape, batch: torch.Tensor,
                     version: int, ledger: Optional[Ledger], batch_index: int) -> None:
        problem = self._violation(x, y, shape)
        if ledger is not None and isinstance(y, torch.Tensor):
            copied = not is_view_of(y, x)
            ledger.record(st.name, x, y, batch=batch_index, stage_index=i,
                          bytes_allocated=storage_nbytes(y) if copied else 0, deferred=self.runs_at_boundary[i],
                          note=self._notes[i])
        if problem is None and batch._version != version:
            problem = "an in-place write into the batch's storage (_version %d -> %d)" % (version, batch._version)
        if problem is not None:
            raise StageError("stage %d %r: contract violation: %s; a stage must return a view of its input "
                             "and never write" % (i, st.name, problem))

    @staticmethod
    def _violation(x: torch.Tensor, y: Any, shape: Shape) -> Optional[str]:
        if not isinstance(y, torch.Tensor):
            return "it returned %s, not a torch.Tensor" % type(y).__name__
        if not is_view_of(y, x):
            return "its output does not share storage with its input (allocated %d bytes)" % storage_nbytes(y)
        if y.dtype != x.dtype:
            return "it changed the dtype from %s to %s" % (x.dtype, y.dtype)
        if tuple(y.shape) != shape:
            return "its output shape %s differs from its output_shape() %s" % (tuple(y.shape), shape)
        return None
