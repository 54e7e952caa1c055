"""The conv family's op type names (nndct's, and torch.jit's for a conv with string padding)."""
CONV2D = "nndct_conv2d"
DEPTHWISE_CONV2D = "nndct_depthwise_conv2d"
CONVTRANSPOSE2D = "nndct_conv_transpose_2d"
DEPTHWISE_CONVTRANSPOSE2D = "nndct_depthwise_conv_transpose_2d"
CONV_TYPES = (CONV2D, DEPTHWISE_CONV2D, CONVTRANSPOSE2D, DEPTHWISE_CONVTRANSPOSE2D)
# a Conv2d with string padding as torch.jit traces it: a float operator with no nndct type
CONVOLUTION_MODE = "aten::_convolution_mode"
