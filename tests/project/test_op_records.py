"""The op list (pipeline/ops/): every family one unit, one record, every piece given or declared absent
with its reason, and no two records claiming the same op type or the same call."""
import importlib
import pkgutil

import pytest

from pipeline import ops
from pipeline.ops.record import Absent, DpuRule, OpRecord, OpSpec

KINDS = ("dpu", "float", "layout", "shape", "io")
ROLES = ("conv", "params", "bias_corr", "norm", "arithmetic", "binary", "const_operand", "operand_list",
         "fix_align_pool", "cle_act", "cle_pool", "adaquant", "adaquant_pair_layer", "adaquant_act", "fresh_output",
         "pad_fusion", "reshape_like", "quant_start", "quant_end", "input_scope")


def _units():
    """The modules under pipeline/ops/ that define a RECORD (the others, like record.py, are support
    modules the units share)."""
    names = (m.name for m in pkgutil.iter_modules(ops.__path__))
    return sorted(n for n in names if hasattr(importlib.import_module("pipeline.ops." + n), "RECORD"))


def test_every_unit_is_in_the_list_once_and_is_named_after_its_family():
    families = [r.family for r in ops.RECORDS]
    assert len(families) == len(set(families))
    assert sorted(families) == _units(), "a unit under pipeline/ops/ is missing from RECORDS, or the reverse"
    for record in ops.RECORDS:
        unit = importlib.import_module("pipeline.ops." + record.family)
        assert unit.RECORD is record
        assert (unit.__doc__ or "").strip(), "ops/%s.py says what the family is" % record.family


@pytest.mark.parametrize("record", ops.RECORDS, ids=lambda r: r.family)
def test_every_piece_of_a_record_is_given_or_declared_absent_with_its_reason(record):
    assert isinstance(record, OpRecord)
    assert record.specs or record.refusals, "a family holds at least one op type, or a refused call"
    for op, spec in record.specs.items():
        assert isinstance(spec, OpSpec) and spec.kind in KINDS, (op, spec)
    assert record.source.strip(), "the upstream source of the record's facts"
    assert isinstance(record.approximation, Absent) or record.approximation.strip()
    own = set(record.specs)
    for table in (record.modules, record.functions, record.methods):
        assert set(table.values()) <= own, "%s maps a call to another family's type" % record.family
    assert set(record.signatures) <= own
    for role, types in record.roles.items():
        assert role in ROLES and set(types) <= own, (role, types)
    assert own <= set(record.dpu_rule), "%s: a DPU-support rule (or Absent) for every type" % record.family
    for op, rule in record.dpu_rule.items():
        assert op in own or op.startswith("aten::"), "%s judges another family's type %r" % (record.family, op)
        if isinstance(rule, Absent):
            continue
        assert isinstance(rule, DpuRule) and callable(rule.rule) and isinstance(rule.judges_float, bool), (op, rule)
        assert rule.names and all(isinstance(n, str) and n for n in rule.names), (op, rule.names)


def test_every_dpu_rule_key_and_name_the_inspector_looks_up_resolves_to_one_record():
    seen = {}
    for record in ops.RECORDS:
        for op in record.dpu_rule:
            assert op not in seen, "%r is judged by both %s and %s" % (op, seen[op], record.family)
            assert op in ops.OPS or op not in ops.RECORD_OF, op
            seen[op] = record.family
    assert ops.DPU_RULES == {op: r for rec in ops.RECORDS for op, r in rec.dpu_rule.items()}
    # every call the capture's tables recognise has its rule or its reason
    for op in set(ops.MODULE_OPS.values()) | set(ops.FUNCTION_OPS.values()) | set(ops.METHOD_OPS.values()):
        assert op in ops.DPU_RULES, op
    # the inspector removes these (re-links their readers): no rule, a reason
    assert isinstance(ops.DPU_RULES[ops.IDENTITY], Absent) and isinstance(ops.DPU_RULES[ops.CONTIGUOUS], Absent)
    # a name finds the first rule that lists it (the xmodel's ops, known by name only: a conv2d is the DPU
    # conv's, not the float aten::_convolution_mode's that prints the same name)
    first = {}
    for rule in ops.DPU_RULES.values():
        if isinstance(rule, DpuRule):
            for n in rule.names:
                first.setdefault(n, rule)
    assert {n: r.rule for n, r in ops.DPU_RULE_BY_NAME.items()} == {n: r.rule for n, r in first.items()}
    assert ops.DPU_RULE_BY_NAME["conv2d"] is ops.DPU_RULES[ops.CONV2D]
    from pipeline.inspect.xmodel_dpu import _FLOAT_OPERATORS, _TYPES
    # every name an xmodel's op is inspected as finds its rule, but the float operators sub and div (judged as
    # such), the writer's helper stack (reshape's shape list; "not in the operator table") and the custom types a
    # unit runs itself (nndct_instance_norm: a custom op, judged as a float operator by its own name)
    from pipeline.xir.interp_ops import is_custom
    missing = set(v for k, v in _TYPES.items() if not is_custom(k)) - set(ops.DPU_RULE_BY_NAME)
    assert missing <= set(_FLOAT_OPERATORS) | {"stack"}, missing


def test_no_op_type_or_call_is_claimed_twice():
    for attr in ("specs", "modules", "module_rules", "functions", "function_rules", "methods", "refusals"):
        seen = {}
        for record in ops.RECORDS:
            for key in getattr(record, attr):
                assert key not in seen, "%s %r is in both %s and %s" % (attr, key, seen[key], record.family)
                seen[key] = record.family


def test_the_tables_are_read_off_the_records():
    assert ops.OPS == {op: s for r in ops.RECORDS for op, s in r.specs.items()}
    assert set(ops.MODULE_OPS.values()) | set(ops.FUNCTION_OPS.values()) | set(ops.METHOD_OPS.values()) <= set(ops.OPS)
    assert not set(ops.FUNCTION_OPS) & set(ops.FUNCTION_RULES), "a function has a type or a rule, not both"
    assert ops.RECORD_OF[ops.CONV2D].family == "conv" and ops.spec("aten::erf") == ops.GENERIC_FLOAT
    assert set(ops.CONV_TYPES) < set(ops.PARAM_TYPES) and ops.BIAS_CORR_TYPES == ops.CONV_TYPES + (ops.DENSE,) + (
        ops.conv1d.CONV1D,)
    # a params type's call and bias-correction dims are its record's where the record gives them (OpRecord.layer)
    assert set(ops.LAYER) <= set(ops.PARAM_TYPES) and set(ops.NORM) <= set(ops.NORM_TYPES)


def test_a_record_without_a_reason_for_a_missing_piece_is_refused():
    with pytest.raises(ValueError, match="reason"):
        Absent(" ")


# --------------------------------------------------------------------------- the ONNX forms (OpRecord.onnx)

@pytest.mark.parametrize("record", ops.RECORDS, ids=lambda r: r.family)
def test_every_op_type_has_its_onnx_form_or_the_reason_it_has_none(record):
    assert set(record.onnx) == set(record.specs), "%s: one ONNX entry per op type" % record.family
    for op, form in record.onnx.items():
        assert isinstance(form, Absent) or callable(form), (op, form)


def test_the_onnx_exporter_finds_every_form_in_the_records():
    from pipeline.quantizers.sim.export.onnx import handlers
    # the exporter's own tables hold only calls that are no op of the op list
    assert not set(handlers.OWN_FUNCTIONS) & (set(ops.FUNCTION_OPS) | set(ops.FUNCTION_RULES))
    assert not set(handlers.OWN_METHODS) & set(ops.METHOD_OPS)
    for op in ops.OPS:  # every op type resolves to its record's form (None where Absent)
        form = ops.RECORD_OF[op].onnx[op]
        assert handlers.form_of(op) is (None if isinstance(form, Absent) else form)
    assert handlers.form_of("aten::erf") is None
    modules, functions, methods = handlers.supported()
    assert {"Conv2d", "Linear", "LayerNorm", "Hardtanh"} <= modules and {"roll", "cat"} <= functions
    assert {"view", "unflatten"} <= methods


def test_a_record_without_its_onnx_entry_is_refused():
    with pytest.raises(TypeError, match="onnx"):
        OpRecord(family="x", specs={"x": OpSpec("float", False, False, False)}, approximation=Absent("none"),
                 source="here", dpu_rule={})


def test_a_record_without_its_dpu_rule_is_refused():
    with pytest.raises(TypeError, match="dpu_rule"):
        OpRecord(family="x", specs={"x": OpSpec("float", False, False, False)}, approximation=Absent("none"),
                 source="here", onnx={})


def test_a_conv_with_string_padding_is_the_float_operator_torch_traces():
    from torch import nn
    from pipeline.ops.conv import CONVOLUTION_MODE, conv_type
    assert conv_type(nn.Conv2d(3, 8, 3, padding="same")) == CONVOLUTION_MODE == "aten::_convolution_mode"
    assert conv_type(nn.Conv2d(3, 8, 3, padding="valid")) == CONVOLUTION_MODE
    assert ops.is_float_operator(CONVOLUTION_MODE) and conv_type(nn.Conv2d(3, 8, 3, padding=1)) == ops.CONV2D


def test_prelu_quantizes_its_slopes_in_its_own_module():
    from torch import nn
    assert ops.MODULE_OPS[nn.PReLU] == ops.PRELU and ops.PRELU in ops.NORM_TYPES
    # the capture reads a norm's functional form's weight (and bias) by its record's signature
    assert all("weight" in ops.SIGNATURES[op][0] for op in ops.NORM_TYPES)
    assert ops.spec(ops.PRELU).quantizable and not ops.spec(ops.PRELU).group_up


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


def test_the_quantization_passes_per_op_sets_are_read_off_the_records():
    """The passes' sets (once literal tuples in sim/plan.py, cle.py, adaquant.py, calib.py, xmodel/deploy.py)
    are the roles of the records, with the same members."""
    from pipeline.quantizers.sim import adaquant, calib, cle, plan
    from pipeline.quantizers.sim.xmodel import deploy
    pools = {ops.MAX_POOL, ops.AVG_POOL, ops.ADAPTIVEAVGPOOL2D}
    assert set(plan.POOL_TYPES) == pools and set(cle.POOL_TYPES) == pools
    assert set(cle.ACT_TYPES) == {ops.RELU}
    assert set(adaquant.TUNED_TYPES) == set(ops.CONV_TYPES) | {ops.DENSE, ops.conv1d.CONV1D}  # nndct's CONV_LIKE_OPS
    assert set(adaquant.PAIR_LAYER_TYPES) == {ops.CONV2D, ops.DEPTHWISE_CONV2D, ops.CONVTRANSPOSE2D}
    assert set(adaquant.PAIR_ACT_TYPES) == {ops.RELU, ops.RELU6, ops.HSWISH, ops.HSIGMOID}
    import torch.nn.functional as F
    assert adaquant.FLOAT_ACTS == {ops.RELU: F.relu, ops.RELU6: F.relu6, ops.HSIGMOID: F.hardsigmoid,
                                   ops.HSWISH: F.hardswish}
    assert set(calib.FRESH_OUTPUT_TYPES) == set(ops.PARAM_TYPES) | {ops.RELU, ops.LEAKY_RELU} | pools
    assert set(deploy.POOL_OR_CONV) == set(ops.CONV_TYPES) | {ops.MAX_POOL, ops.AVG_POOL}
    assert set(deploy.RESHAPE_LIKE) == {ops.FLATTEN, ops.SQUEEZE, ops.UNSQUEEZE}


def test_every_refused_call_is_one_record_s_row_and_the_capture_reads_them():
    from pipeline.fx import refusals
    from pipeline.ops.refusal import ONNX, SIMULATION, XMODEL, Known
    for record in ops.RECORDS:
        for call, known in record.refusals.items():
            assert isinstance(known, Known) and known.stops and known.stops <= {SIMULATION, XMODEL, ONNX}, call
            assert known.what.strip() and known.real.strip() and known.instead.strip(), call
    assert ops.REFUSALS == {c: k for r in ops.RECORDS for c, k in r.refusals.items()}
    assert set(refusals.MODULES) | set(refusals.FUNCTIONS) | set(refusals.METHODS) \
        == set(ops.REFUSALS)
    assert refusals.METHODS["max"] is ops.reduce_max.MAX_DIM


def test_a_record_without_its_refusals_is_refused():
    with pytest.raises(TypeError, match="refusals"):
        OpRecord(family="x", specs={}, approximation=Absent("a test"), source="a test", onnx={}, dpu_rule={},
                 xmodel={}, xir_ops=Absent("a test"), traced={}, sim={})


@pytest.mark.parametrize("record", ops.RECORDS, ids=lambda r: r.family)
def test_every_type_has_its_simulation_piece_or_runs_torch_s_call(record):
    from pipeline.ops.sim_support import SimForm
    assert set(record.sim) == set(record.specs), "%s: a sim piece (or TORCH) for every type" % record.family
    for op, form in record.sim.items():
        assert isinstance(form, Absent) or (isinstance(form, SimForm) and callable(form.run)
                                            and callable(form.lower)), op


def test_the_simulation_reads_its_per_op_arithmetic_off_the_records():
    simulated = {op for op, form in ops.SIM.items() if ops.sim_form(op) is not None}
    assert simulated == {ops.LEAKY_RELU, ops.HSWISH, ops.HSIGMOID, ops.MAX_POOL, ops.AVG_POOL, ops.ADAPTIVEAVGPOOL2D,
                         ops.QUANT_STUB, ops.DEQUANT_STUB}
    # the DPU approximations apply only inside the quantized parts; the stubs' identity everywhere
    assert {op for op in simulated if ops.sim_form(op).exact} == {ops.QUANT_STUB, ops.DEQUANT_STUB}
    assert ops.sim_form(ops.CONV2D) is None and ops.sim_form("aten::erf") is None


def test_a_record_without_its_sim_piece_is_refused():
    with pytest.raises(TypeError, match="sim"):
        OpRecord(family="x", specs={}, approximation=Absent("a test"), source="a test", onnx={}, dpu_rule={},
                 xmodel={}, xir_ops=Absent("a test"), traced={}, refusals={})
