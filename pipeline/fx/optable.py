"""THE op table: every operator the graph capture knows, as the real quantizer names and treats it.

One row per nndct op type (``nndct_shared/base/key_names.py``, ``NNDCT_OP``; an operator nndct
has no type for keeps its torch type ``aten::<name>`` and runs in float: its warning
``QUANTIZER_TORCH_FLOAT_OP``; its node is named ``aten_<name>_<index>``). Each :class:`OpSpec` says:

- ``kind``: ``"dpu"`` (a DPU operation), ``"float"`` (a float operator: runs on the CPU in
  float, on its quantized input; ``inspect`` puts exactly these on the CPU for that reason),
  ``"layout"`` (moves or views data: reshape, flatten, permute, transpose, slices; where it runs
  follows its neighbours), ``"shape"`` (shape arithmetic on traced sizes: Python ints, never
  quantized), ``"io"`` (input, constant);
- ``quantizable``: the op is one of nndct's ``QUANTIZABLE_OPS``: its group's output always gets a
  fix position, and so do the outputs feeding it. Any other node gets one only when it feeds a
  quantizable node (so Sigmoid, Tanh, SiLU, clamp and ``aten::mean`` are quantized before a
  conv and left in float as the model output; docs/arithmetic.md#float-operators);
- ``layout``: the node never carries its own fix position; it defers to its producer
  (reshape, flatten, slicing, ...);
- ``group_up``: the node joins its producer's quantization group when it is the producer's only
  consumer (``SoftFuse*`` commands of ``nndct_shared/quantization/commander.py``).

The module/function/method tables map what ``torch.fx`` records to a row. Anything else the
model calls becomes a generic float operator ``aten::<name>`` (not quantizable, not layout).
Adding an op is a change here (and, when its arithmetic differs from the torch call, in
``pipeline/quantizers/sim/ops.py``).
"""
import operator
from collections import namedtuple

import torch
import torch.nn.functional as F
from torch import nn

from .attention import trunc_div

OpSpec = namedtuple("OpSpec", "kind quantizable layout group_up")

# nndct op type strings
INPUT = "nndct_input"
CONST = "nndct_const"
CONV2D = "nndct_conv2d"
DEPTHWISE_CONV2D = "nndct_depthwise_conv2d"
CONVTRANSPOSE2D = "nndct_conv_transpose_2d"
DEPTHWISE_CONVTRANSPOSE2D = "nndct_depthwise_conv_transpose_2d"
DENSE = "nndct_dense"
BATCH_NORM = "nndct_batch_norm"
RELU = "nndct_relu"
RELU6 = "nndct_relu6"
LEAKY_RELU = "nndct_leaky_relu"
MAX_POOL = "nndct_maxpool"
AVG_POOL = "nndct_avgpool"
ADAPTIVEAVGPOOL2D = "nndct_adaptive_avg_pool2d"
FLATTEN = "nndct_flatten"
RESHAPE = "nndct_reshape"
SHAPE = "nndct_shape"
CONTIGUOUS = "nndct_contiguous"
PERMUTE = "nndct_permute"
TRANSPOSE = "nndct_transpose"
STRIDED_SLICE = "nndct_strided_slice"
SELECT = "nndct_select"  # x[i] with an int i: torch traces aten::select
INDEX = "nndct_index"  # x[t] with a tensor t: torch traces aten::index
UNSQUEEZE = "nndct_unsqueeze"
SQUEEZE = "nndct_squeeze"
EXPAND = "nndct_expand"
TRUNC_DIV = "aten::div"  # an int divided with rounding_mode="trunc" (MultiheadAttention's head_dim)
MATMUL = "nndct_matmul"
ZEROS = "nndct_zeros"  # x.new_zeros(size), torch.zeros(size)
EQUAL = "nndct_equal"  # x == y
REMAINDER = "aten::remainder"  # x % c: a float operator (nndct has no type), c a const node
FILL = "aten::fill_"  # the in-place fill of ``x[idx] = number`` (after its nndct_strided_slice)
TUPLE_INDEX = "nndct_tuple_index"  # one output of an op returning several (torch.sort, ...)
RESIZE = "nndct_resize"
HSWISH = "nndct_hswish"
HSIGMOID = "nndct_hsigmoid"
ADD = "nndct_elemwise_add"
SUB = "nndct_elementwise_sub"  # sic: nndct's spelling
RSUB = "nndct_rsub"  # a number minus a tensor: torch traces ``c - x`` as ``rsub(x, c)``
MULTIPLY = "nndct_elemwise_mul"
DIV = "nndct_elemwise_div"
FLOOR_DIVIDE = "nndct_floor_divide"
CONCAT = "nndct_concat"
PAD = "nndct_pad_nd"
SIGMOID = "nndct_sigmoid"
TANH = "nndct_tanh"
GELU = "nndct_GELU"
LAYER_NORM = "nndct_layer_norm"
SOFTMAX = "nndct_softmax"
CLAMP = "nndct_clamp"
SILU = "aten::silu"
MEAN = "aten::mean"
IDENTITY = "identity"  # Dropout/Identity before the rewrites remove them (inspect's view)
RETURN = "nndct_return"

_DPU_Q = OpSpec("dpu", True, False, False)
_FLOAT = OpSpec("float", False, False, False)
_FLOAT_Q = OpSpec("float", True, False, False)
_LAYOUT = "layout"

OPS = {
    INPUT: OpSpec("io", True, False, False),
    CONST: OpSpec("io", False, False, False),
    CONV2D: _DPU_Q,
    DEPTHWISE_CONV2D: _DPU_Q,
    CONVTRANSPOSE2D: _DPU_Q,
    DEPTHWISE_CONVTRANSPOSE2D: _DPU_Q,
    DENSE: _DPU_Q,
    BATCH_NORM: _DPU_Q,  # unfused (no conv before it): a scale/offset layer
    RELU: OpSpec("dpu", False, False, True),
    RELU6: OpSpec("dpu", False, False, True),
    LEAKY_RELU: OpSpec("dpu", False, False, True),
    MAX_POOL: _DPU_Q,
    AVG_POOL: _DPU_Q,
    ADAPTIVEAVGPOOL2D: _DPU_Q,
    RESIZE: _DPU_Q,
    HSWISH: _DPU_Q,
    HSIGMOID: _DPU_Q,
    ADD: _DPU_Q,
    MULTIPLY: _DPU_Q,
    CONCAT: _DPU_Q,
    TRANSPOSE: OpSpec(_LAYOUT, False, False, True),  # not in QUANTIZABLE_OPS; SoftFuseTranspose
    SELECT: _FLOAT,  # nndct warns QUANTIZER_TORCH_FLOAT_OP for nndct_select and nndct_index
    INDEX: _FLOAT,
    UNSQUEEZE: OpSpec(_LAYOUT, False, True, True),
    SQUEEZE: OpSpec(_LAYOUT, False, True, True),
    EXPAND: OpSpec("float", False, False, True),  # a float operator (nndct's warning) joining its parent's group
    TRUNC_DIV: OpSpec("shape", False, False, False),
    MATMUL: _DPU_Q,
    ZEROS: OpSpec("io", False, False, False),
    EQUAL: _FLOAT,
    REMAINDER: _FLOAT,
    PAD: OpSpec("dpu", False, False, False),
    FLATTEN: OpSpec(_LAYOUT, False, True, True),
    RESHAPE: OpSpec(_LAYOUT, False, True, False),
    CONTIGUOUS: OpSpec(_LAYOUT, False, True, True),
    PERMUTE: OpSpec(_LAYOUT, False, True, True),
    STRIDED_SLICE: OpSpec(_LAYOUT, False, True, False),
    IDENTITY: OpSpec(_LAYOUT, False, True, False),
    TUPLE_INDEX: OpSpec(_LAYOUT, False, False, False),  # carries its own fix pos: the op's is a tuple
    SHAPE: OpSpec("shape", False, False, False),
    FLOOR_DIVIDE: OpSpec("shape", False, False, False),
    SIGMOID: _FLOAT,
    TANH: _FLOAT,
    SILU: _FLOAT,
    MEAN: _FLOAT,
    CLAMP: _FLOAT,
    GELU: _FLOAT_Q,
    LAYER_NORM: _FLOAT_Q,
    SOFTMAX: _FLOAT_Q,
    SUB: _FLOAT_Q,
    RSUB: _FLOAT_Q,
    DIV: _FLOAT_Q,
}
GENERIC_FLOAT = _FLOAT  # any aten::<name> node

CONV_TYPES = (CONV2D, DEPTHWISE_CONV2D, CONVTRANSPOSE2D, DEPTHWISE_CONVTRANSPOSE2D)
PARAM_TYPES = CONV_TYPES + (DENSE, BATCH_NORM)
BIAS_CORR_TYPES = CONV_TYPES + (DENSE,)  # nndct's BatchNorm module does no bias correction
# float operators whose weight and bias (gamma, beta) nndct's module quantizes as parameters in its
# own forward (``pytorch_nndct/nn/modules/layernorm.py``), then runs the torch operator with them
NORM_TYPES = (LAYER_NORM,)
# elementwise arithmetic: a Python number operand becomes an nndct_const node
ARITHMETIC_TYPES = (ADD, SUB, MULTIPLY, DIV, FLOOR_DIVIDE, REMAINDER, TRUNC_DIV)
# element-wise binary ops of tensors (XIR add/sub/mul/div; rsub is written as sub(c, x))
BINARY_TYPES = (ADD, SUB, RSUB, MULTIPLY, DIV)
# the jit kinds whose number operand nndct's parser turns into a const node, numbered first
# (``OptPass.transform_const_scalar_to_const_tensor``)
CONST_OPERAND_TYPES = BINARY_TYPES + (REMAINDER,)


def spec(op: str) -> OpSpec:
    """The OpSpec of an op type (``aten::*`` types: the generic float operator)."""
    return OPS.get(op, GENERIC_FLOAT)


def is_float_operator(op: str) -> bool:
    """True for the op types that run in float on the CPU (not on the DPU)."""
    return spec(op).kind == "float"


def is_layout(op: str) -> bool:
    """True for the op types that only move or view data."""
    return spec(op).kind == _LAYOUT


MODULE_OPS = {
    nn.Linear: DENSE,
    nn.modules.linear.NonDynamicallyQuantizableLinear: DENSE,  # nn.MultiheadAttention's out_proj
    nn.BatchNorm1d: BATCH_NORM,
    nn.BatchNorm2d: BATCH_NORM,
    nn.ReLU: RELU,
    nn.ReLU6: RELU6,
    nn.LeakyReLU: LEAKY_RELU,
    nn.MaxPool2d: MAX_POOL,
    nn.AvgPool2d: AVG_POOL,
    nn.AdaptiveAvgPool2d: ADAPTIVEAVGPOOL2D,
    nn.Flatten: FLATTEN,
    nn.Upsample: RESIZE,
    nn.Hardswish: HSWISH,
    nn.Hardsigmoid: HSIGMOID,
    nn.Sigmoid: SIGMOID,
    nn.Tanh: TANH,
    nn.GELU: GELU,
    nn.LayerNorm: LAYER_NORM,
    nn.SiLU: SILU,
    nn.Softmax: SOFTMAX,
    nn.ZeroPad2d: PAD,
}
FUNCTION_OPS = {
    F.relu: RELU,
    torch.relu: RELU,
    F.relu6: RELU6,
    F.leaky_relu: LEAKY_RELU,
    F.max_pool2d: MAX_POOL,
    F.avg_pool2d: AVG_POOL,
    F.adaptive_avg_pool2d: ADAPTIVEAVGPOOL2D,
    F.interpolate: RESIZE,
    F.hardswish: HSWISH,
    F.hardsigmoid: HSIGMOID,
    torch.flatten: FLATTEN,
    torch.add: ADD,
    operator.add: ADD,
    operator.iadd: ADD,
    torch.sub: SUB,
    operator.sub: SUB,
    operator.isub: SUB,
    torch.mul: MULTIPLY,
    operator.mul: MULTIPLY,
    operator.imul: MULTIPLY,
    torch.div: DIV,
    operator.truediv: DIV,
    operator.itruediv: DIV,
    operator.floordiv: FLOOR_DIVIDE,
    operator.mod: REMAINDER,
    torch.remainder: REMAINDER,
    operator.eq: EQUAL,
    torch.eq: EQUAL,
    operator.matmul: MATMUL,
    torch.matmul: MATMUL,
    torch.unsqueeze: UNSQUEEZE,
    torch.squeeze: SQUEEZE,
    torch.select: SELECT,
    trunc_div: TRUNC_DIV,
    torch.zeros: ZEROS,
    torch.floor_divide: FLOOR_DIVIDE,
    torch.cat: CONCAT,
    torch.reshape: RESHAPE,
    torch.permute: PERMUTE,
    torch.transpose: TRANSPOSE,
    F.pad: PAD,
    torch.sigmoid: SIGMOID,
    F.sigmoid: SIGMOID,
    torch.tanh: TANH,
    F.tanh: TANH,
    F.gelu: GELU,
    F.layer_norm: LAYER_NORM,
    F.silu: SILU,
    torch.softmax: SOFTMAX,
    F.softmax: SOFTMAX,
    torch.clamp: CLAMP,
    torch.clip: CLAMP,
    torch.mean: MEAN,
    operator.getitem: STRIDED_SLICE,
}
METHOD_OPS = {
    "relu": RELU,
    "relu_": RELU,  # op_dispatcher.relu_: a TorchReLU (inplace), as relu
    "flatten": FLATTEN,
    "view": RESHAPE,
    "reshape": RESHAPE,
    "size": SHAPE,
    "dim": SHAPE,
    "numel": SHAPE,
    "contiguous": CONTIGUOUS,
    "unsqueeze": UNSQUEEZE,
    "squeeze": SQUEEZE,
    "select": SELECT,
    "expand": EXPAND,
    "matmul": MATMUL,
    "new_zeros": ZEROS,
    "eq": EQUAL,
    "permute": PERMUTE,
    "transpose": TRANSPOSE,
    "add": ADD,
    "sub": SUB,
    "mul": MULTIPLY,
    "div": DIV,
    "sigmoid": SIGMOID,
    "tanh": TANH,
    "softmax": SOFTMAX,
    "clamp": CLAMP,
    "clip": CLAMP,
    "mean": MEAN,
}
# calls that split a tensor into a tuple; each piece taken becomes an nndct_strided_slice node
SPLIT_FUNCTIONS = (torch.chunk, torch.split)
SPLIT_METHODS = ("chunk", "split")
