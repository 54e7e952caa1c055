"""The one graph capture (pipeline/fx/capture.py) and the op list's capture tables (pipeline/ops/)."""
import json

import torch
from torch import nn

from pipeline.apis import torch_quantizer
from pipeline import ops as optable
from pipeline.fx.capture import capture
from pipeline.quantizers.quant_config import load_quant_config


def test_every_mapped_op_has_a_row_in_the_op_table():
    mapped = set(optable.MODULE_OPS.values()) | set(optable.FUNCTION_OPS.values()) | set(optable.METHOD_OPS.values())
    assert mapped <= set(optable.OPS)
    floats = sorted(op for op in optable.OPS if optable.is_float_operator(op))
    assert floats == sorted([optable.SIGMOID, optable.TANH, optable.SILU, optable.MEAN, optable.CLAMP,
                             optable.GELU, optable.LAYER_NORM, optable.SOFTMAX, optable.SUB, optable.RSUB,
                             optable.DIV, optable.EQUAL, optable.REMAINDER, optable.SELECT, optable.INDEX,
                             optable.EXPAND, optable.conv.CONVOLUTION_MODE, optable.HARDTANH, optable.MISH,
                             optable.LOG_SOFTMAX, optable.NEG, optable.instance_norm.INSTANCE_NORM,
                             optable.RECIPROCAL, optable.LSTM, optable.GRU])
    assert optable.is_float_operator("aten::erf") and not optable.spec("aten::erf").quantizable


class _Shapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        n, c, h, w = x.shape
        y = torch.cat([a, b], 1).view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        return self.conv(y) * 0.5 - 1.0


def test_constants_first_shape_nodes_and_chunk_pieces_named_as_nndct_does():
    graph = capture(_Shapes(), torch.zeros(1, 4, 3, 3), load_quant_config(None).rewrites())
    assert [n.name for n in graph.nodes] == [
        "nndct_const_0", "nndct_const_1", "nndct_const_2", "nndct_input_3",
        "nndct_strided_slice_4", "nndct_shape_5", "nndct_strided_slice_6",
        "nndct_shape_7", "nndct_shape_8", "nndct_shape_9", "nndct_shape_10", "nndct_concat_11",
        "nndct_floor_divide_12", "nndct_reshape_13", "nndct_transpose_14", "nndct_reshape_15",
        "nndct_conv2d_16", "nndct_elemwise_mul_17", "nndct_elementwise_sub_18"]
    by = graph.by_name
    # the number operands of * and - first (nndct's parser makes them const nodes in one pass), then
    # the int of c // 2; the real quantizer's quant_info.json for this model has nndct_const_0
    # [[8, 7]] (0.5) and nndct_const_1 [[8, 6]] (1.0)
    assert [n.value for n in graph.nodes[:3]] == [0.5, 1.0, 2]
    assert by["nndct_const_2"].shape_value and by["nndct_floor_divide_12"].shape_value
    assert [i.name for i in by["nndct_strided_slice_6"].inputs] == ["nndct_input_3", "nndct_shape_5"]
    # arithmetic with a constant runs in float on the CPU; the shape arithmetic does not count
    assert [n.name for n in graph.float_operators()] == ["nndct_elemwise_mul_17", "nndct_elementwise_sub_18"]


class _TupleOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        values, _ = torch.sort(self.a(x), dim=1)
        gy, _ = torch.meshgrid(torch.arange(x.shape[2]), torch.arange(x.shape[3]), indexing="ij")
        return self.b(values) + gy.float(), x.numel()


def test_ops_returning_several_outputs_and_shape_tensors_are_simulated(tmp_path):
    """torch.sort (a float operator with two outputs): the values it gives the next conv get the
    fix position; meshgrid of traced sizes is shape arithmetic, never quantized."""
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    model = _TupleOps()
    q = torch_quantizer("calib", model, (x,), output_dir=str(tmp_path), device="cpu")
    q.quant_model(x)
    q.export_quant_config()
    info = json.load(open(str(tmp_path / "quant_info.json")))
    # one node per call, several outputs and all (nndct's parser: torch.jit's one node, a ListUnpack folded
    # into its producer, OptPass.unpack_ListUnpack_op): the sort's values carry its entry
    assert list(info["output"]) == ["_TupleOps::nndct_input_0", "_TupleOps::nndct_conv2d_1",
                                    "_TupleOps::nndct_conv2d_8", "_TupleOps::nndct_elemwise_add_10",
                                    "_TupleOps::aten_sort_2"]
    t = torch_quantizer("test", model, (x,), output_dir=str(tmp_path), device="cpu")
    y, numel = t.quant_model(x)
    assert numel == x.numel() and y.shape == (2, 4, 4, 4)
    fp = info["output"]["_TupleOps::nndct_elemwise_add_10"][0][1]
    assert torch.equal(torch.round(y * 2.0 ** fp), y * 2.0 ** fp)  # on the add's grid


class _HandSwish(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        x = self.a(x)
        return self.b(x * torch.nn.functional.relu6(x + 3) / 6)


def test_int_operands_of_tensor_arithmetic_are_quantized_constants(tmp_path):
    """``x + 3`` and ``/ 6`` (Python ints): constants with their own fix positions, as the float
    constants of the real quantizer's golden_wide data; the test-mode graph uses their values."""
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    model = _HandSwish()
    q = torch_quantizer("calib", model, (x,), output_dir=str(tmp_path), device="cpu")
    q.quant_model(x)
    q.export_quant_config()
    info = json.load(open(str(tmp_path / "quant_info.json")))["output"]
    assert info["_HandSwish::nndct_const_0"] == [[8, 5]] and info["_HandSwish::nndct_const_1"] == [[8, 4]]
    t = torch_quantizer("test", model, (x,), output_dir=str(tmp_path), device="cpu")
    consts = [a for n in t.quant_model.graph.nodes if n.op == "call_function" for a in n.args if isinstance(a, float)]
    assert 3.0 in consts and 6.0 in consts


def test_example_shapes_match_torch_shape_prop_and_need_no_symbolic_shapes_import():
    # the shapes come from a plain fx Interpreter: the same as torch's ShapeProp (a tuple per tensor
    # output, None for ints, torch.Size and the chunk tuple), without its sympy import
    import subprocess
    import sys

    from torch.fx.passes.shape_prop import ShapeProp
    graph = capture(_Shapes(), torch.zeros(2, 4, 3, 3), load_quant_config(None).rewrites())
    shapes = graph.example_shapes
    ShapeProp(graph.gm).propagate(torch.zeros(2, 4, 3, 3))
    expected = {n: (tuple(n.meta["tensor_meta"].shape) if hasattr(n.meta.get("tensor_meta"), "shape") else None)
                for n in graph.gm.graph.nodes}
    assert shapes == expected
    assert shapes[graph.output_node] == (2, 4, 3, 3) and None in shapes.values()
    code = ("import sys, torch\nfrom pipeline.fx.capture import capture\n"
            "from pipeline.quantizers.quant_config import load_quant_config\n"
            "g = capture(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU()), torch.zeros(1, 1, 5, 5),"
            " load_quant_config(None).rewrites())\n"
            "assert g.example_shapes[g.output_node] == (1, 2, 3, 3)\n"
            "print('torch.fx.experimental.symbolic_shapes' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _keep_or_scale(x, training):
    """A torch.fx-wrapped function that returns its input in eval mode (torchvision's
    stochastic_depth): torch.jit records no op for it."""
    return x * 2.0 if training else x


torch.fx.wrap("_keep_or_scale")


def _relu_in_place(x):
    return x.relu_()  # returns its input, but after an in-place op: a node in nndct


torch.fx.wrap("_relu_in_place")


class _InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 1)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x):
        y = _keep_or_scale(self.act(self.c(x)), self.training)
        y = torch.nn.functional.silu(y, True) + torch.nn.functional.silu(y)
        return _relu_in_place(y)


def test_in_place_float_operators_keep_the_underscore_and_passthrough_calls_make_no_node():
    """Issue 23 (real quantizer: corpus efficientnet_inplace): nn.SiLU(inplace=True) and
    F.silu(x, True) are aten::silu_ (nodes aten_silu__N); a wrapped call returning its input
    unchanged is no node, one returning it after an in-place op is: traced through, as torch.jit
    does, its x.relu_() is nndct's relu (op_dispatcher.relu_)."""
    graph = capture(_InPlace().eval(), torch.zeros(1, 3, 2, 2), load_quant_config(None).rewrites())
    names = [n.name for n in graph.nodes]
    assert names[:6] == ["nndct_input_0", "nndct_conv2d_1", "aten_silu__2", "aten_silu__3", "aten_silu_4",
                         "nndct_elemwise_add_5"]
    assert names[6:] == ["nndct_relu_6"] and graph.nodes[6].fx_node.target == "relu_"


def test_fx_takes_plain_rewrite_flags_and_imports_no_quantizer():
    # fx sits below the quantizers: its modules import nothing of pipeline.quantizers (at module level or
    # inside functions); the quantizer's config turns into fx's plain flags (QuantConfig.rewrites)
    import ast
    import pathlib
    from pipeline.fx.rewrites import Rewrites
    import pipeline.fx
    fx_folder, ops_folder = (pathlib.Path(m.__file__).parent for m in (pipeline.fx, optable))
    for path in sorted(fx_folder.glob("*.py")) + sorted(ops_folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                name = "." * node.level + (node.module or "")
                assert "quantizers" not in name, "%s imports %s" % (path.name, name)
    assert load_quant_config(None).rewrites() == Rewrites(relu6_to_relu=True, silu_to_hswish=False)
    cfg = load_quant_config(None)
    cfg.include_cle, cfg.convert_silu_to_hswish = False, True
    assert cfg.rewrites() == Rewrites(relu6_to_relu=False, silu_to_hswish=True)


class _Factories(nn.Module):
    def forward(self, x):
        rows = torch.arange(x.shape[2]).float()
        ones = torch.full((x.shape[0], 1, 1, x.shape[3]), 2.0)
        return torch.reshape(x * ones + rows.view(1, 1, -1, 1), (x.shape[0], -1))


def test_torch_functions_given_traced_sizes_are_recorded_in_every_torch():
    """torch 2's fx records torch.arange(x.shape[2]) (its argument parser hands a Proxy in a number
    argument to __torch_function__); torch 1.13's parser refuses it, and the capture records it
    the same way there (pipeline/fx/proxy_args.py), restoring the torch namespace afterwards."""
    from pipeline.fx.float_trace import fx_trace
    from pipeline.fx.proxy_args import proxy_arguments_recorded
    builtins = (torch.arange, torch.full, torch.reshape)
    _, graph = fx_trace(_Factories)
    calls = [n for n in graph.nodes if n.op == "call_function" and n.target in builtins]
    assert [n.target for n in calls] == list(builtins) and [n.name for n in calls] == ["arange", "full", "reshape"]
    assert str(calls[1].args[0]) == "(getitem_1, 1, 1, getitem_2)" and calls[1].args[1] == 2.0
    assert (torch.arange, torch.full, torch.reshape) == builtins  # the namespace is restored
    x = torch.randn(2, 3, 4, 5)
    assert torch.equal(torch.fx.GraphModule(_Factories(), graph)(x), _Factories()(x))
    assert proxy_arguments_recorded() == (not torch.__version__.startswith("1."))
