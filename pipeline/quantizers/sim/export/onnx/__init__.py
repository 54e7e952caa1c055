"""Write a lowered test-mode model (``torch.fx.GraphModule``) as ONNX, in two flavours.

The graph is walked node by node and every ONNX node is emitted with ``onnx.helper``;
``torch.onnx.export`` is not used (its exporter differs between torch 1.13 and 2.x, and it cannot
express the DPU's half_up rounding).

Input contract (the lowered test-mode model of the ``sim`` quantizer):

- ``pipeline.fixpoint.fake_quant(x, fix_pos, bitwidth, method)`` is the only custom
  call; ``method`` is ``"half_up"`` (input and activations) or ``"std_round"``; it means
  ``q = clamp(R(x * 2^fix_pos), -2^(b-1), 2^(b-1) - 1)`` and ``x_hat = q * 2^-fix_pos``
  (docs/arithmetic.md#number-format, docs/arithmetic.md#rounding).
- ``nn.Conv2d`` / ``nn.ConvTranspose2d`` / ``nn.Linear`` hold weights and bias that are already
  quantized (float32 values exactly ``q * 2^-fix_pos``) and carry the integer attributes
  ``weight_fix_pos``, ``bias_fix_pos`` and ``bitwidth``.
- everything else is a standard module, function or method listed in ``MODULE_HANDLERS``,
  ``FUNCTION_HANDLERS`` and ``METHOD_HANDLERS``; Python numbers are constants.
- attributes ``quant_info`` (the ``quant_info.json`` dict) and ``output_fix_pos`` (int or None).

Layout: ``builder.py`` (recording, the Builder), ``flavours.py`` (one class per flavour: how a
quantization point and a parameter are written), ``handlers.py`` (every other op, the same in both
flavours, and the literal registries) with ``float_ops.py`` (the float operators, the unfused
BatchNorm, chunk/split pieces), ``layer_norm.py`` and ``bilinear.py`` (bilinear resizing), ``export.py``
(the graph walk and the file).

Flavours (``FLAVOURS``):

- ``"exact"``: each fake_quant becomes ``v = Mul(x, 2^p)``, the rounding, ``Clip(-2^(b-1),
  2^(b-1)-1)`` and ``Mul(2^-p)``. half_up is ``r = Round(v)`` (half to even) plus 1 where
  ``v - r == 0.5``; std_round is ``Sign(v) * (Floor(|v|) + (|v| - Floor(|v|) >= 0.5))``. These
  are the rules of ``pipeline.fixpoint`` (``round_half_up``, ``round_std``), exact for
  every float32 value, so ONNX Runtime reproduces the simulation bit for bit. The shortcut
  ``Floor(v + 0.5)`` is not used: for v = 0.5 - 2^-25 the addition rounds up to 1.0 and gives 1
  where the DPU kernel (``_vai_round_cpu``, docs/arithmetic.md#rounding) gives 0. Weights and bias are float32
  initializers holding the exact quantized values.
- ``"qdq"``: each fake_quant becomes ``QuantizeLinear -> DequantizeLinear`` (scale 2^-fix_pos,
  int8 zero point 0). QuantizeLinear rounds half to even (ONNX operator spec), the DPU half_up
  (ties toward +inf), so on a value exactly on a half-LSB tie the two differ by 1 LSB at that
  quantization point. Weights and bias are int8 code initializers followed by DequantizeLinear.
  The bias is int8 with its own scale 2^-bias_fix_pos, not int32 at scale s_in * s_w: the DPU keeps
  an 8-bit bias with its own fix_pos (docs/arithmetic.md#bias-and-bias-correction) and ``shift_bias = w + i - b`` may be negative
  (docs/arithmetic.md#export-time-adjustments), where an int32 code at s_in * s_w would not be an integer.

Every other operation is written the same way in both flavours, as float32 arithmetic whose
result is the one torch computes: average pooling is an exact window sum (a depthwise Conv with a
ones kernel) divided by the divisor (torch divides; multiplying by the reciprocal differs in the
last bit), global adaptive average pooling is ReduceSum then Div by H*W (torch's ``mean``), other
adaptive average pooling divides by kh then kw (as torch's kernel does), nearest resizing is two
Gathers with the source indices torch itself computes, bilinear resizing is Gathers times torch's
own weights where every sum is exact in float32 (power-of-two scales; refused elsewhere, see
``bilinear.py``). The sums are exact when the summed values
lie on a power-of-two grid and every partial sum fits in float32's 24-bit significand, which holds
for the quantized operands of the contract; then the summation order of torch and ONNX Runtime
does not matter. ``mean`` is the same exact sum divided by the count. An element-wise float
operator (Sigmoid, Tanh, SiLU, GELU) on a quantized input is a Gather from a table of torch's own
values for each of the 2^b input codes (ONNX Runtime's kernels differ from torch's in the last
bits); Softmax is the standard op. A layer norm is torch's float32 CPU kernel written out step by
step, its fused multiply-adds as exact float64 FMAs (``layer_norm.py``). ``x[:, i]`` (``torch.select``)
is a Gather of the index then a Squeeze; ``token.expand(n, -1, -1)`` (ViT's class token) an Expand
to the input's batch size. ``scaled_dot_product_attention`` (inside ``nn.MultiheadAttention``) is
refused in both flavours: torch's CPU attention kernel (online softmax with its own vectorized exp,
normalized after the second product) and ONNX's MatMul/Softmax/MatMul (or Exp/ReduceSum/Div) differ
in the last bits of most outputs, and the quantization right after it can turn that into 1 LSB.

The ONNX file is opset 13, IR version 7 (loads with the onnx / onnxruntime of the Vitis AI 3.5
image and here), has a dynamic batch dimension ``N`` on its input ``input`` and its outputs
(``output``, or ``output_0``, ``output_1``, ...; ``_io`` is appended to these names when a layer
of the model already has one), and its bytes depend only on the graph: node and
tensor names come from the fx node names, the producer is fixed and there is no timestamp.
``metadata_props`` holds ``flavour``, ``rounding``, ``bias``, ``fix_pos`` (JSON table),
``output_fix_pos`` and ``quant_info``.
"""
from .builder import OPSET
from .export import export_onnx
from .flavours import FLAVOURS

__all__ = ["OPSET", "FLAVOURS", "export_onnx"]
