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
