"""nn.MultiheadAttention, a class token and a position embedding against the real quantizer.

tests/support/corpus_attention.py's models ran through the real pytorch_nndct 3.5 (tests/data/README.md,
attention_real/) in both configurations (default; nocle = no CLE, no bias correction): the sim
must write the same quant_info.json (the in_proj_weight / in_proj_bias / out_proj parameters, the
``aten_scaled_dot_product_attention_N`` and ``nndct_select_N`` entries, the null fix positions of
the position embedding and of the shape arithmetic ``bsz * num_heads``), the same bias_corr.pth
and the same test-mode outputs, bit for bit. The capture numbers torchvision's ViT's nodes as
nndct does (its generated module's node names), and the exact ONNX flavour reproduces the
simulation of the class token / position embedding / ``x[:, 0]`` model in ONNX Runtime, while
refusing scaled_dot_product_attention clearly.
"""
import os

import numpy as np
import pytest
import torch

from pipeline.cpu import cpu_capability
from pipeline.fx.capture import capture
from pipeline.quantizers import quant_info as qi
from pipeline.quantizers.quant_config import load_quant_config

from tests.support import DATA, SUPPORT, corpus_attention, corpus_models
from tests.support.xmodel_compare import assert_same_xmodel

REAL = os.path.join(DATA, "attention_real")
CONFIGS = {"default": None, "nocle": {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}}
NAMES = list(corpus_attention.CORPUS)


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    """Both phases of every model in both configurations, each phase in a new process; returns
    the output root (``<root>/<cfg>/<model>``)."""
    root = tmp_path_factory.mktemp("attention")
    corpus_models.run_phases(os.path.join(SUPPORT, "corpus_attention.py"), root, CONFIGS)
    return str(root)


@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("name", NAMES)
def test_attention_equals_the_real_quantizer(name, cfg, phases):
    root = phases
    real = os.path.join(REAL, cfg, name)
    with open(os.path.join(real, "seeded.sha256")) as f:
        assert corpus_models.seeded_sha256(name, corpus_attention) == f.read().strip(), \
            "the seeds no longer make the weights and data the reference was made from"
    folder = os.path.join(root, cfg, name)
    mine, theirs = qi.read_quant_info(folder), qi.read_quant_info(real)
    for key in ("param", "output", "input"):
        assert list(mine[key].items()) == list(theirs[key].items()), key
    assert mine["graph_md5"] == theirs["graph_md5"]  # the same nodes, types and edges as nndct's graph
    got, want = np.load(os.path.join(folder, "y_0.npy")), np.load(os.path.join(real, "y_0.npy"))
    assert got.dtype == want.dtype and np.array_equal(got.view(np.int32), want.view(np.int32))
    if cfg == "default" and cpu_capability() == "AVX512":
        # the corrections' last bits follow the conv kernels of the vector unit (the references'
        # is AVX-512): the fix positions and outputs above hold on any, these only on the same
        a, b = (torch.load(os.path.join(d, "bias_corr.pth")) for d in (folder, real))
        assert list(a) == list(b)
        assert all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)


def test_reference_has_the_attention_entries():
    """What the real quantizer makes of nn.MultiheadAttention (the reference itself, read)."""
    info = qi.read_quant_info(os.path.join(REAL, "default", "attention"))
    params, outputs = list(info["param"]), info["output"]
    assert "TokenAttention::attention.in_proj_weight" in params and "TokenAttention::attention.out_proj.bias" in params
    assert info["param"]["TokenAttention::pos_embedding"] == [[8, None]]
    assert not any("class_token" in p for p in params)
    assert outputs["TokenAttention::aten_scaled_dot_product_attention_40"][0][1] is not None
    assert [k for k, v in outputs.items() if v[0][1] is None] == [
        "TokenAttention::nndct_elemwise_mul_%d" % i for i in (25, 29, 33, 42)]


def test_size_product_null_entries_onnx_and_xmodel(phases):
    """Shape arithmetic outside attention (``reshape(n, c * h * w)`` from traced sizes): the null
    entries are in the reference, the exact ONNX reproduces the simulation, and the xmodel is the
    real quantizer's."""
    ort = pytest.importorskip("onnxruntime")
    folder = os.path.join(phases, "default", "size_product")
    real = os.path.join(REAL, "default", "size_product")
    assert [k for k, v in qi.read_quant_info(real)["output"].items() if v[0][1] is None] == [
        "SizeProduct::nndct_elemwise_mul_5", "SizeProduct::nndct_elemwise_mul_7"]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(os.path.join(folder, "SizeProduct_int.onnx"), sess_options=options,
                                   providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: corpus_attention.make_inputs("size_product", 4, 3)[0].numpy()})
    assert np.array_equal(got[0].view(np.int32), np.load(os.path.join(folder, "y_0.npy")).view(np.int32))
    assert_same_xmodel(os.path.join(folder, "xmodel", "SizeProduct_int.xmodel"),
                       os.path.join(real, "SizeProduct_int.xmodel"))


def test_exact_onnx_of_class_token_and_select_equals_the_simulation(phases):
    pytest.importorskip("onnxruntime")
    folder = os.path.join(phases, "default", "tokens")
    assert corpus_models.exported(folder, "onnx")
    got = corpus_models.exact_onnx_outputs(folder, corpus_attention.make_inputs("tokens", 4, 3))
    expected = np.load(os.path.join(folder, "y_0.npy"))
    assert np.array_equal(got[0].view(np.int32), expected.view(np.int32))


def test_exact_onnx_refuses_scaled_dot_product_attention(phases):
    folder = os.path.join(phases, "default", "attention")
    assert not any(f.endswith(".onnx") for f in os.listdir(folder))
    assert not corpus_models.exported(
        folder, "onnx", "scaled_dot_product_attention (nn.MultiheadAttention) has no bit-exact ONNX form")


def test_vit_nodes_are_numbered_as_nndct_does():
    """torchvision's ViT (tests/support/corpus_torchvision.py tv_vit): every node name of the capture, in
    order, is the real quantizer's (its generated module, attention_real/tv_vit_nodes.txt), and so
    is the graph's md5 (node types and edges)."""
    from tests.support import corpus_torchvision
    corpus_torchvision.require_torchvision()
    model = corpus_torchvision.make_model("tv_vit")
    graph = capture(model, corpus_torchvision.make_inputs("tv_vit", 1, 3)[0], load_quant_config(None).rewrites())
    with open(os.path.join(REAL, "tv_vit_nodes.txt")) as f:
        want = f.read().split()
    assert [n.name for n in graph.nodes] == want
    # nndct's Graph.get_md5 of its graph, as tests/data/corpus_real/tv_vit/quant_info.json holds it
    assert graph.graph_md5() == qi.read_quant_info(os.path.join(DATA, "corpus_real", "tv_vit"))["graph_md5"]
    in_proj = graph.by_name["nndct_dense_31"]
    assert in_proj.param_names == {
        "weights": "VisionTransformer::encoder.layers.encoder_layer_0.self_attention.in_proj_weight",
        "bias": "VisionTransformer::encoder.layers.encoder_layer_0.self_attention.in_proj_bias"}
    assert graph.by_name["nndct_elemwise_add_23"].free_params == ["VisionTransformer::encoder.pos_embedding"]


class _WithWeights(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x)[0]  # need_weights=True: the bmm/softmax path, not inlined


def test_attention_with_weights_stays_one_float_operator():
    graph = capture(_WithWeights().eval(), torch.randn(1, 4, 8), load_quant_config(None).rewrites())
    # one node with its two outputs (output, weights); the [0] taken is no node of its own
    assert [n.op for n in graph.nodes] == ["nndct_input", "aten::multiheadattention"]
