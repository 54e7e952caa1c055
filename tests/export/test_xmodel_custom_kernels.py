"""The interpreter's kernels of custom ops the file determines (pipeline/xir/aten_ops.py: generic float operators
whose type name says all they compute; the units' ``OpRecord.custom_kernels``: ``nndct_log_softmax {axis}``),
held to torch's call and to the real quantizer's test-mode outputs (tests/data/activations_real), and the
message for a custom op the file does not determine."""
import glob
import os

import numpy as np
import pytest
import torch

from pipeline import ops
from pipeline.xir import aten_ops, interp, interp_ops, reader
from tests.support import DATA, cli_json
from tests.support import corpus_activations as corpus

REAL = os.path.join(DATA, "activations_real")


def _graph(path):
    return reader.check(reader.read_xmodel(path))


def _custom_types(graph):
    return {op.type for op in graph.ops if interp_ops.is_custom(op.type)}


@pytest.mark.parametrize("kind", sorted(aten_ops.ELEMENTWISE))
def test_each_elementwise_aten_kernel_is_torchs_call(kind):
    x = torch.randn(2, 5, 4, 3, generator=torch.Generator().manual_seed(0)) * 3
    x = x.contiguous().permute(0, 2, 3, 1)  # an NHWC view of NCHW memory, as the interpreter holds a feature map
    fn = aten_ops.ELEMENTWISE[kind]
    want = fn(x.permute(0, 3, 1, 2).contiguous()).permute(0, 2, 3, 1)  # the simulation's call on its NCHW tensor
    for type_ in ("aten::" + kind, "aten::%s_" % kind):
        kernel = interp_ops.custom_kernel(type_)
        assert kernel is aten_ops.KERNELS[type_] and kernel.complete and interp_ops.determined(type_)
        got = kernel.fn(None, [x])
        assert got.shape == want.shape
        assert np.array_equal(got.contiguous().numpy().view(np.int32), want.contiguous().numpy().view(np.int32))
    if kind in ("alpha_dropout", "feature_alpha_dropout"):  # torch's test-mode call: the identity
        assert torch.equal(getattr(torch, kind)(x, 0.5, False), x)
    else:
        torch_fn = getattr(torch, kind, None) or getattr(torch.nn.functional, "logsigmoid")
        assert np.array_equal(torch_fn(x).contiguous().numpy().view(np.int32),
                              want.contiguous().numpy().view(np.int32))


def test_the_room_holds_no_type_a_unit_holds():
    assert not set(aten_ops.KERNELS) & set(ops.CUSTOM_KERNELS)
    assert not set(aten_ops.KERNELS) & set(ops.XIR_OPS)
    assert not {t for r in ops.RECORDS for t in r.custom_kernels} & set(aten_ops.KERNELS)
    assert all(interp_ops.is_custom(t) for t in aten_ops.KERNELS)


def _runnable():
    names = []
    for path in sorted(glob.glob(os.path.join(REAL, "*", "*.xmodel"))):
        customs = _custom_types(_graph(path))
        if customs and all(interp_ops.custom_kernel(t) is not None for t in customs):
            names.append(os.path.basename(os.path.dirname(path)))
    return names


RUNNABLE = _runnable()


def test_the_real_files_the_new_kernels_run():
    for name in ("alphadrop", "logsigmoid", "selu", "softsign", "m_neg_", "logsoftmax", "m_log_softmax",
                 "logsoftmax_head", "mish", "f_mish"):
        assert name in RUNNABLE, name


@pytest.mark.parametrize("name", RUNNABLE)
def test_a_real_file_with_custom_ops_runs_alone_as_the_real_test_mode_output(name):
    """The real quantizer's file, run without float_ops on the 4 eval samples one at a time, gives the real
    quantizer's test-mode outputs (y_0.npy, one batch-4 forward) bit for bit."""
    path = glob.glob(os.path.join(REAL, name, "*.xmodel"))[0]
    graph = _graph(path)
    (x,) = corpus.make_inputs(name, 4, 3)
    want = np.load(os.path.join(REAL, name, "y_0.npy"))
    got = np.concatenate([interp.model_outputs(graph, interp.run(graph, [x[i:i + 1]]), [(1,) + want.shape[1:]])[0]
                          .contiguous().numpy() for i in range(4)])
    if name in ("logsoftmax_head",):  # a float output: torch's own log_softmax kernel (test_activations_real)
        from tests.support import torch_line_of_references
        if not torch_line_of_references():
            assert np.all(np.abs(got - want) <= np.spacing(np.abs(want)))
            return
    assert np.array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("name", ["layernorm_tokens", "layernorm_channels_last"])
def test_a_real_layer_norm_file_runs_alone_as_the_real_test_mode_output(name):
    """nndct_layer_norm's fallback kernel (``ops/layer_norm.py``): ViT's tokens, and ConvNeXt's channels-last
    norm whose permute nndct dropped (the norm reads the conv's NHWC output), run without float_ops as the real
    quantizer's test-mode outputs, bit for bit."""
    from tests.support import corpus_refused
    folder = os.path.join(DATA, "refused_real", name)
    graph = _graph(glob.glob(os.path.join(folder, "*.xmodel"))[0])
    assert "nndct_layer_norm" in _custom_types(graph) and not interp_ops.determined("nndct_layer_norm")
    (x,) = corpus_refused.make_inputs(name, 4, 3)
    want = np.load(os.path.join(folder, "y_0.npy"))
    got = np.concatenate([interp.model_outputs(graph, interp.run(graph, [x[i:i + 1]]), [(1,) + want.shape[1:]])[0]
                          .contiguous().numpy() for i in range(4)])
    assert np.array_equal(got.view(np.int32), want.view(np.int32))


def test_a_custom_op_the_file_does_not_determine_says_so_and_what_to_do():
    path = glob.glob(os.path.join(REAL, "hardtanh", "*.xmodel"))[0]
    graph = _graph(path)
    (x,) = corpus.make_inputs("hardtanh", 1, 3)
    with pytest.raises(interp.InterpreterError) as e:
        interp.run(graph, [x])
    text = str(e.value)
    assert "(nndct_hardtanh): the file carries no bounds" in text and "min_val and max_val" in text
    assert "not computable from the file: python -m pipeline xmodel run cannot run it" in text
    assert "pipeline.xir.interp.run(graph, inputs, float_ops=" in text
    path = glob.glob(os.path.join(DATA, "refused_real", "topk", "*.xmodel"))[0]
    with pytest.raises(interp.InterpreterError, match=r"\(aten::topk\): a float operator .* not the call's other "
                                                      r"arguments .* not computable from the file"):
        interp.run(_graph(path), [torch.randn(_graph(path).ops[0].shape).permute(0, 3, 1, 2)])


def test_the_cli_runs_a_real_file_of_a_generic_float_operator(capsys, tmp_path):
    path = glob.glob(os.path.join(REAL, "alphadrop", "*.xmodel"))[0]
    (x,) = corpus.make_inputs("alphadrop", 1, 3)
    np.save(str(tmp_path / "x.npy"), x.numpy())
    code, r = cli_json(capsys, "xmodel", "run", path, "--input", str(tmp_path / "x.npy"))
    assert code == 0 and r["ok"], r


@pytest.mark.parametrize("tail", ("c_eq_h_eq_w", "pooled", "aten_abs"))
def test_an_export_verifies_the_kernels_against_the_simulation(tmp_path, tail):
    """The writer's verification runs a determined custom op's kernel (the simulation is asked for no call of
    it) and holds it to the simulation bit for bit; the written file then runs alone, as the simulation."""
    from torch import nn
    from tests.support.dropin_flow import conv, quantize
    last = {"c_eq_h_eq_w": [nn.LogSoftmax(dim=1)],  # C = H = W = 8: the dims cannot tell NHWC from NCHW
            "pooled": [nn.AdaptiveAvgPool2d(1), nn.LogSoftmax(dim=1)],  # [1, 1, 1, 8]: both readings contiguous
            "aten_abs": [nn.Softsign()]}[tail]  # abs, add, div: aten::abs a generic float operator
    model = nn.Sequential(conv(), *last)
    q = quantize(tmp_path, model)
    path = q.export_xmodel(str(tmp_path / "x"))
    graph = _graph(path)
    assert _custom_types(graph) <= set(aten_ops.KERNELS) | {"nndct_log_softmax"} and _custom_types(graph)
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = q.quant_model(x)
    (got,) = interp.model_outputs(graph, interp.run(graph, [x]), [tuple(want.shape)])
    assert np.array_equal(got.contiguous().numpy().view(np.int32), want.detach().numpy().view(np.int32))
