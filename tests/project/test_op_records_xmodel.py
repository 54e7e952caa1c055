"""The op list's xmodel pieces (pipeline/ops/): every type's xmodel form or the reason the writer refuses it,
the XIR op types each unit writes (defined, shaped and run by exactly one unit), the custom kernels, and the
writer's, interpreter's and inspector's tables read off the records (test_op_records.py holds the rest)."""
import pytest

from pipeline import ops
from pipeline.ops.record import Absent, OpRecord, OpSpec

# ------------------------------------------------------------------------------------------ the xmodel
@pytest.mark.parametrize("record", ops.RECORDS, ids=lambda r: r.family)
def test_every_type_has_its_xmodel_form_or_the_reason_the_writer_refuses_it(record):
    from pipeline.ops.xmodel_support import XmodelForm
    assert set(record.xmodel) == set(record.specs), "%s: xmodel gives every type of the family" % record.family
    for op, form in record.xmodel.items():
        assert isinstance(form, (XmodelForm, Absent)), (op, form)
        if isinstance(form, XmodelForm):
            assert callable(form.lower) and callable(form.create), op


def test_the_xmodel_rooms_read_their_forms_off_the_records():
    from pipeline.quantizers.sim.xmodel import convert, lower
    assert not hasattr(lower, "SUPPORTED") and not hasattr(convert, "CREATORS")
    assert ops.XMODEL == {op: f for r in ops.RECORDS for op, f in r.xmodel.items()}
    assert ops.xmodel_form(ops.CONV2D) is ops.RECORD_OF[ops.CONV2D].xmodel[ops.CONV2D]
    assert ops.xmodel_form(ops.FLOOR_DIVIDE) is None and ops.xmodel_form("aten::erf") is None  # refused; custom op
    # the types the writer writes today (before the records: lower.SUPPORTED and the aten:: types)
    written = {op for op in ops.OPS if ops.xmodel_form(op) is not None}
    assert written == {ops.INPUT, ops.CONST, ops.CONV2D, ops.DEPTHWISE_CONV2D, ops.CONVTRANSPOSE2D,
                       ops.DEPTHWISE_CONVTRANSPOSE2D, ops.DENSE, ops.BATCH_NORM, ops.RELU, ops.RELU6, ops.LEAKY_RELU,
                       ops.MAX_POOL, ops.AVG_POOL, ops.ADAPTIVEAVGPOOL2D, ops.FLATTEN, ops.RESHAPE, ops.CONTIGUOUS,
                       ops.PERMUTE, ops.TRANSPOSE, ops.STRIDED_SLICE, ops.RESIZE, ops.HSWISH, ops.HSIGMOID, ops.ADD,
                       ops.SUB, ops.RSUB, ops.MULTIPLY, ops.DIV, ops.CONCAT, ops.PAD, ops.SIGMOID, ops.TANH, ops.GELU,
                       ops.SOFTMAX, ops.CLAMP, ops.SILU, ops.MEAN, "aten::remainder", ops.TRUNC_DIV, ops.PRELU,
                       ops.conv.CONVOLUTION_MODE, ops.LAYER_NORM, ops.SELECT, ops.SQUEEZE, ops.UNSQUEEZE,
                       ops.HARDTANH, ops.MISH, ops.LOG_SOFTMAX, ops.NEG, ops.instance_norm.INSTANCE_NORM,
                       ops.conv1d.CONV1D, ops.pixel_shuffle.PIXEL_SHUFFLE, ops.pixel_shuffle.PIXEL_UNSHUFFLE,
                       ops.QUANT_STUB, ops.RECIPROCAL, ops.MAX, ops.SHAPE, ops.EXPAND, ops.INDEX,
                       ops.MATMUL, ops.ZEROS, ops.float_arith.EQUAL}


def test_a_record_without_its_xmodel_piece_is_refused():
    with pytest.raises(TypeError, match="xmodel"):
        OpRecord(family="x", specs={"t": OpSpec("io", False, False, False)}, approximation=Absent("none"),
                 source="s")


# ------------------------------------------------------------------------------------------ XIR op types
class _Op:
    def __init__(self, type_):
        self.type, self.name = type_, type_


class _Attrs(dict):
    def __missing__(self, key):
        return 0 if key in ("pad_mode", "axis") else [1, 1]


class _Param:
    name = "n.weight"


class _Node:
    def __init__(self, op):
        self.type, self.name, self.attrs, self.transpose_out_order = op, "n", _Attrs(), None
        self.params = {"weights": _Param(), "bias": _Param()}
        self.out = type("Out", (), {"shape": [1, 1]})()


class _RecordingWriter:
    """The xmodel writer's methods a creator calls (xmodel_support's docstring), recording the XIR op
    types the creator asks for by name. Consts and fixes are the writer's own (``fixed_const``,
    ``fix_op``); a custom op is a type XIR does not define."""

    def __init__(self):
        self.types, self.outputs, self.x = [], {"n": (8, 7)}, self
        self.customs = []  # the custom op types asked for (types XIR does not define)

    def fixed_op(self, name, type_, attrs=None, inputs=None):
        self.types.append(type_)
        return _Op(type_)

    create_op = fixed_op  # w.x.create_op

    def with_params(self, node, type_, attrs):
        self.types.append(type_)

    def fixed_const(self, name, data):
        return _Op("const")

    def create_const_op(self, name, data):
        return _Op("const")

    def fix_op(self, op, bit_width, fix_pos):
        return _Op("fix")

    def op_of(self, name):
        return _Op("x")

    def data_inputs(self, node):
        return [_Op("x"), _Op("y")]

    def custom(self, node, attrs=None):
        self.customs.append(node.type)


def _written(record):
    """The XIR op types the record's creators write (custom ones only where a unit runs them)."""
    from pipeline.ops.xmodel_support import XmodelForm
    w = _RecordingWriter()
    for op, form in record.xmodel.items():
        if isinstance(form, XmodelForm):
            form.create(w, _Node(op))
    # a custom type counts where a unit runs it itself (its XirOp: nndct_instance_norm, held in NHWC)
    return set(w.types) | (set(w.customs) & set(ops.XIR_OPS))


# the XIR format's own type a unit writes: the graph's input, which the interpreter feeds itself (xir/interp.py)
FORMAT_TYPES_WRITTEN_BY_UNITS = {"data"}


@pytest.mark.parametrize("record", ops.RECORDS, ids=lambda r: r.family)
def test_every_xir_type_a_unit_writes_is_defined_shaped_and_run_by_one_unit(record):
    from pipeline.ops.xir_support import OpDef, XirOp
    written = _written(record)
    if isinstance(record.xir_ops, Absent):
        assert written <= FORMAT_TYPES_WRITTEN_BY_UNITS | set(ops.XIR_OPS), (record.family, written)
        return
    assert record.xir_ops, "%s: give its XIR ops, or declare them Absent with the reason" % record.family
    for type_, piece in record.xir_ops.items():
        assert isinstance(piece, XirOp) and isinstance(piece.definition, OpDef), type_
        assert piece.definition.type == type_ and callable(piece.definition.shape) and callable(piece.kernel)
    assert set(record.xir_ops) <= written, "%s defines XIR types it does not write" % record.family
    # a type several units write is held by one of them (mul: eltwise; stack: reshape)
    assert written <= set(record.xir_ops) | set(ops.XIR_OPS) | FORMAT_TYPES_WRITTEN_BY_UNITS, written


def _custom_written(record):
    """The custom XIR op types (types XIR does not define: the nndct type itself) the record's creators write."""
    from pipeline.ops.xmodel_support import XmodelForm
    w = _RecordingWriter()
    for op, form in record.xmodel.items():
        if isinstance(form, XmodelForm):
            form.create(w, _Node(op))
    return set(w.customs)


# custom types a unit runs though no unit's creator writes them: float operators without an nndct type, which
# the writer writes as custom ops of their aten:: name (nn.SiLU(inplace=True): float_activation's kernel)
CUSTOM_TYPES_OF_NO_CREATOR = {"aten::silu_"}


@pytest.mark.parametrize("record", ops.RECORDS, ids=lambda r: r.family)
def test_every_custom_type_a_unit_writes_has_its_kernel_or_the_reason_it_has_none(record):
    from pipeline.ops.xir_support import CustomKernel
    # a custom type the unit runs as an XIR op of its own (xir_ops with xir_support.custom_def: a custom op the file
    # holds in NHWC, nndct_instance_norm) has its kernel there
    own = set() if isinstance(record.xir_ops, Absent) else set(record.xir_ops)
    written = _custom_written(record) - own
    assert not set(record.custom_kernels) & own, record.family
    assert written <= set(record.custom_kernels), \
        "%s writes custom ops %s: give each its interpreter kernel or declare it Absent with the reason" % (
            record.family, sorted(written - set(record.custom_kernels)))
    assert set(record.custom_kernels) <= written | CUSTOM_TYPES_OF_NO_CREATOR, record.family
    for type_, kernel in record.custom_kernels.items():
        assert isinstance(kernel, Absent) or (isinstance(kernel, CustomKernel) and callable(kernel.fn)
                                              and isinstance(kernel.complete, bool)), type_


def test_the_interpreter_runs_custom_ops_with_the_units_kernels():
    from pipeline.ops.xir_support import CustomKernel
    from pipeline.xir import interp_ops
    assert not hasattr(interp_ops, "_BUILT_IN_CUSTOM") and not hasattr(interp_ops, "_NHWC_CUSTOM")
    seen = {}
    for record in ops.RECORDS:
        for type_, kernel in record.custom_kernels.items():
            assert type_ not in seen, "custom type %s in both %s and %s" % (type_, seen[type_], record.family)
            seen[type_] = record.family
            if isinstance(kernel, CustomKernel):
                assert ops.CUSTOM_KERNELS[type_] is kernel
                assert interp_ops.is_custom(type_), "%s is a type XIR defines" % type_
    assert set(ops.CUSTOM_KERNELS) <= set(seen)


def test_no_xir_type_is_held_twice_and_the_format_holds_only_types_no_unit_writes():
    from pipeline.xir import interp_ops, opdefs
    seen = {}
    for record in ops.RECORDS:
        for type_ in ({} if isinstance(record.xir_ops, Absent) else record.xir_ops):
            assert type_ not in seen, "XIR %s is in both %s and %s" % (type_, seen[type_], record.family)
            seen[type_] = record.family
    written = set().union(*(_written(r) for r in ops.RECORDS))
    assert set(seen) <= written
    format_types = set(opdefs._FORMAT_DEFS) | set(interp_ops._FORMAT_OPS)
    assert not format_types & set(seen), "a type in both the format's table and a unit"
    assert format_types & written == FORMAT_TYPES_WRITTEN_BY_UNITS
    for type_, piece in ops.XIR_OPS.items():  # the format's tables are read off the records
        assert opdefs.get(type_) is piece.definition and interp_ops.OPS[type_] is piece.kernel


def test_a_record_without_its_xir_piece_is_refused():
    with pytest.raises(TypeError, match="xir_ops"):
        OpRecord(family="x", specs={"t": OpSpec("io", False, False, False)}, approximation=Absent("none"),
                 source="s", xmodel={"t": Absent("none")})


def test_the_layout_pass_reads_the_nhwc_ops_and_the_attribute_rewrites_off_the_records():
    from pipeline.ops.xmodel_support import XmodelForm
    from pipeline.quantizers.sim.xmodel import layout
    forms = {op: f for op, f in ops.XMODEL.items() if isinstance(f, XmodelForm)}
    assert set(layout.IMPLICIT_OPS) == {op for op, f in forms.items() if f.nhwc} == set(ops.CONV_TYPES) | {
        ops.MAX_POOL, ops.AVG_POOL, ops.ADAPTIVEAVGPOOL2D, ops.RESIZE, ops.BATCH_NORM, ops.conv1d.CONV1D,
        ops.pixel_shuffle.PIXEL_SHUFFLE, ops.pixel_shuffle.PIXEL_UNSHUFFLE}
    assert set(layout.SPECIAL_ATTRS) == {ops.RESHAPE, ops.CONCAT, ops.STRIDED_SLICE, ops.SOFTMAX, ops.SHAPE, ops.MAX}


@pytest.mark.parametrize("record", ops.RECORDS, ids=lambda r: r.family)
def test_trace_kinds_and_inspector_names_are_the_records(record):
    assert set(record.traced) <= set(record.specs)
    for op, kinds in record.traced.items():
        assert kinds and all(isinstance(k, str) and not k.startswith("aten::") for k in kinds), op
    for type_, piece in ({} if isinstance(record.xir_ops, Absent) else record.xir_ops).items():
        assert piece.inspected_as.strip(), type_


def test_the_trace_names_and_the_inspector_read_their_tables_off_the_records():
    from pipeline.inspect import xmodel_dpu
    from pipeline.quantizers.sim.xmodel import names
    assert names.KINDS == ops.TRACED == {op: k for r in ops.RECORDS for op, k in r.traced.items()}
    assert not set(xmodel_dpu._FORMAT_TYPES) & set(ops.XIR_OPS)
    assert all(xmodel_dpu._TYPES[x] == piece.inspected_as for x, piece in ops.XIR_OPS.items())


def test_the_weights_layouts_are_the_conv_records():
    import numpy as np
    from torch import nn
    conv_t = nn.ConvTranspose2d(4, 4, 3, groups=4)
    form = ops.xmodel_form(ops.DEPTHWISE_CONVTRANSPOSE2D)
    w = form.weights(conv_t, conv_t.weight.detach().numpy())
    assert w.shape == (1, 3, 3, 4) and form.const_weights(w).shape == (1, 3, 3, 4)
    assert np.array_equal(form.const_weights(w)[:, ::-1, ::-1], w)
    assert ops.xmodel_form(ops.DENSE).weights is None and ops.xmodel_form(ops.CONV2D).const_weights is None
