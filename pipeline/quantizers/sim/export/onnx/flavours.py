"""The two ONNX flavours, one class each: how a quantization point (``fake_quant``) and a
quantized parameter are written. Everything else is the same in both (``handlers.py``)."""
from typing import Dict

import numpy as np
import torch

from .builder import Builder, Unsupported, pow2

ROUNDING_EXACT = ("bit-exact: v = x * 2^fix_pos; half_up (input and activations) is Round(v) (half to "
        "even) + 1 where v - Round(v) == 0.5, i.e. ties toward +inf; std_round is Sign(v) * "
        "(Floor(|v|) + (|v| - Floor(|v|) >= 0.5)), ties away from zero; then Clip to "
        "[-2^(b-1), 2^(b-1)-1] and Mul(2^-fix_pos). Same rules as "
        "pipeline.fixpoint, exact for every float32 value, so ONNX Runtime "
        "reproduces the simulation exactly.")
ROUNDING_QDQ = ("QuantizeLinear rounds half to even (ONNX spec), the DPU rounds activations half_up "
        "(ties toward +inf) and weights std_round: a value exactly on a half-LSB tie can land "
        "1 LSB away from the DPU at that quantization point (more downstream when such "
        "differences add up). Weights and bias are exact integer codes.")
BIAS_EXACT = "float32 initializer holding q * 2^-bias_fix_pos"
BIAS_QDQ = ("int8 codes + DequantizeLinear(scale 2^-bias_fix_pos): the DPU's 8-bit bias with its "
            "own fix_pos; int32 at s_in*s_w is not exact when bias_fix_pos > w + i")


class ExactFlavour:
    """Bit-exact: each fake_quant becomes ``Mul(2^p)``, the DPU rounding written out (half_up:
    ``Round`` plus 1 on ties; std_round: sign * floor(|v| + ...)), ``Clip`` and ``Mul(2^-p)``;
    parameters are float32 initializers holding ``q * 2^-fix_pos``."""

    name = "exact"
    rounding = ROUNDING_EXACT
    bias = BIAS_EXACT

    def quantize(self, b: Builder, x: str, name: str, fix_pos: int, bitwidth: int, method: str) -> str:
        from onnx import TensorProto
        lo, hi = -(2 ** (bitwidth - 1)), 2 ** (bitwidth - 1) - 1
        v = b.op("Mul", [x, b.scalar(name + "/amp", pow2(fix_pos))], name + "/scaled")
        half = b.scalar(name + "/half", 0.5)
        if method == "half_up":  # Round is half-even; add 1 where it went down from a tie
            r = b.op("Round", [v], name + "/round")
            tie = b.op("Equal", [b.op("Sub", [v, r], name + "/frac"), half], name + "/is_tie")
            v = b.op("Add", [r, b.op("Cast", [tie], name + "/tie", to=TensorProto.FLOAT)], name + "/half_up")
        else:  # std_round: sign(v) * (floor(|v|) + (|v| - floor(|v|) >= 0.5))
            a = b.op("Abs", [v], name + "/abs")
            f = b.op("Floor", [a], name + "/floor")
            up = b.op("GreaterOrEqual", [b.op("Sub", [a, f], name + "/frac"), half], name + "/is_up")
            m = b.op("Add", [f, b.op("Cast", [up], name + "/up", to=TensorProto.FLOAT)], name + "/magnitude")
            v = b.op("Mul", [b.op("Sign", [v], name + "/sign"), m], name + "/std_round")
        v = b.op("Clip", [v, b.scalar(name + "/qmin", lo), b.scalar(name + "/qmax", hi)], name + "/clip")
        return b.op("Mul", [v, b.scalar(name + "/lsb", pow2(-fix_pos))], name)

    def parameter(self, b: Builder, name: str, t: torch.Tensor, codes: torch.Tensor, fix_pos: int,
                  bitwidth: int) -> str:
        return b.init(name, t.numpy())


class QdqFlavour:
    """QuantizeLinear -> DequantizeLinear per fake_quant (scale 2^-fix_pos, int8 zero point 0;
    rounds half to even); parameters are int8 codes followed by DequantizeLinear."""

    name = "qdq"
    rounding = ROUNDING_QDQ
    bias = BIAS_QDQ

    def quantize(self, b: Builder, x: str, name: str, fix_pos: int, bitwidth: int, method: str) -> str:
        lo, hi = -(2 ** (bitwidth - 1)), 2 ** (bitwidth - 1) - 1
        if bitwidth > 8:
            raise Unsupported("qdq flavour: opset-13 QuantizeLinear holds at most 8 bits, got "
                              "bitwidth %d; export the 'exact' flavour" % bitwidth)
        scale = b.scalar(name + "/scale", pow2(-fix_pos))
        zero = b.init(name + "/zero_point", np.zeros((), dtype=np.int8))
        q = b.op("QuantizeLinear", [x, scale, zero], name + "/q")
        if bitwidth == 8:
            return b.op("DequantizeLinear", [q, scale, zero], name)
        dq = b.op("DequantizeLinear", [q, scale, zero], name + "/dq")
        return b.op("Clip", [dq, b.scalar(name + "/min", lo * pow2(-fix_pos)),
                             b.scalar(name + "/max", hi * pow2(-fix_pos))], name)

    def parameter(self, b: Builder, name: str, t: torch.Tensor, codes: torch.Tensor, fix_pos: int,
                  bitwidth: int) -> str:
        if bitwidth > 8:
            raise Unsupported("qdq flavour: opset-13 DequantizeLinear of int8 holds at most 8 "
                              "bits, got bitwidth %d; export the 'exact' flavour" % bitwidth)
        if name + "/codes" not in b.initializers:  # a module called twice is written once
            b.init(name + "/codes", codes.to(torch.int8).contiguous().numpy())
            b.op("DequantizeLinear", [name + "/codes", b.scalar(name + "/scale", pow2(-fix_pos)),
                                      b.init(name + "/zero_point", np.zeros((), np.int8))], name)
        return name


FLAVOUR_CLASSES = {"qdq": QdqFlavour, "exact": ExactFlavour}  # type: Dict[str, type]
FLAVOURS = ("qdq", "exact")
