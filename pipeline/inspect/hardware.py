"""Per-target DPU engine parameters: a literal table, one entry per DPU target name.

Source: the target descriptions ``src/vai_runtime/target_factory/targets/<name>.prototxt`` of
github.com/Xilinx/Vitis-AI (master = 3.5; identical in v3.0 where the target exists), summarised in
docs/targets.md#names-and-fingerprints, docs/targets.md#dpuczdx8g-operator-limits. Only the fields the inspection rules use are kept: the conv
engine (channel and pixel parallelism, kernel/stride limits, fusable nonlinear types, weight bank),
the eltwise, ALU, pool and depthwise-conv engines (types, limits, fusable nonlinear types), the
load engine's channel parallelism and the batch (number of DPU cores the name's ``B<n>`` suffix
gives for DPUCVDX8G and DPUCV2DX8G). Target names are those of docs/targets.md#names-and-fingerprints; expired ISA0
names (``DPUCZDX8G_ISA0_B4096_MAX_BG2``) are rejected by Vitis AI 3.x and are not here.

Limits are kept as the prototxt writes them ("1-16", "1,2,3,5,7"); :func:`allows` reads them.
"""

import difflib
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from pipeline.errors import ConfigError


@dataclass(frozen=True)
class Bank:
    """A parameter bank group (weights): ``bank_num`` banks, each ``bank_width`` channels wide and
    ``bank_depth`` words deep (prototxt ``bank_group``)."""

    name: str
    bank_num: int
    bank_width: int
    bank_depth: int


@dataclass(frozen=True)
class ConvEngine:
    """The conv engine: runs conv2d, transposed conv and dense (as a 1x1 conv).

    ``nonlinear`` lists the activations it can fuse (prototxt names: relu, relu_six, leaky_relu,
    hsigmoid, hswish, prelu).
    """

    input_channel_parallel: int
    output_channel_parallel: int
    pixel_parallel: int
    kernel_size: str
    stride: str
    nonlinear: Tuple[str, ...]
    weight_bank: Bank


@dataclass(frozen=True)
class EltwiseEngine:
    """The eltwise engine: element-wise ``elew_types`` (add, mult) with fusable ``nonlinear``."""

    channel_parallel: int
    pixel_parallel: int
    elew_types: Tuple[str, ...]
    nonlinear: Tuple[str, ...]


@dataclass(frozen=True)
class AluEngine:
    """The ALU (misc) engine: depthwise conv, pools, standalone activations (``alu_types``).

    ``pad`` holds the prototxt ``pad_limit`` as (left, right, top, bottom) range strings.
    """

    channel_parallel: int
    pixel_parallel: int
    alu_types: Tuple[str, ...]
    nonlinear: Tuple[str, ...]
    kernel_size: str
    stride: str
    pad: Tuple[str, str, str, str]
    weight_bank: Bank


@dataclass(frozen=True)
class PoolEngine:
    """A dedicated pool engine (DPUCAHX8H): ``pool_types`` (max, avg) with their kernel/stride
    limits; it fuses no activation (its prototxt ``nonlinear`` block is empty)."""

    channel_parallel: int
    pixel_parallel: int
    pool_types: Tuple[str, ...]
    avg_kernel_size: str
    avg_stride: str
    max_kernel_size: str
    max_stride: str


@dataclass(frozen=True)
class DwconvEngine:
    """A dedicated depthwise-conv engine (DPUCAHX8H_ISA2_DWC)."""

    channel_parallel: int
    pixel_parallel: int
    kernel_size: str
    stride: str
    nonlinear: Tuple[str, ...]
    weight_bank: Bank


@dataclass(frozen=True)
class EngineLimits:
    """The limits that apply to one operation on the engine that runs it (see ``DpuEngines``).

    ``pad`` is (left, right, top, bottom) range strings, or None when the only pad rule is
    "pad no larger than the kernel". ``weight_bank`` is None for engines without weights (pools).
    """

    engine: str
    channel_parallel: int
    kernel_size: str
    stride: str
    pad: Optional[Tuple[str, str, str, str]]
    nonlinear: Tuple[str, ...]
    weight_bank: Optional[Bank]


@dataclass(frozen=True)
class DpuEngines:
    """One DPU target: its name, family (prototxt ``type``), batch and engines.

    The helper methods answer "which engine runs this operation, under which limits" the way the
    quantizer's inspector reads a target (vai_q_pytorch ``pytorch_nndct/hardware/dpu_op_filter.py``):
    an ALU engine, where present, runs depthwise conv and pools; otherwise the dedicated pool or
    depthwise engine does.
    """

    name: str
    family: str
    batch: int
    load_channel_parallel: int
    conv: ConvEngine
    eltwise: Optional[EltwiseEngine] = None
    alu: Optional[AluEngine] = None
    pool: Optional[PoolEngine] = None
    dwconv: Optional[DwconvEngine] = None

    def depthwise_limits(self) -> Optional[EngineLimits]:
        """Limits for a depthwise conv, or None when no engine runs one.

        DPUCV2DX8G's ALU lists ``macc_temp`` (multiply-accumulate template) instead of ``dwconv``;
        reading it as the depthwise/average-pool engine is an inference from the type name and
        UG1414's operator list for VEK280, not read in compiler source.
        """
        alu = self.alu
        if alu is not None and ("dwconv" in alu.alu_types or "macc_temp" in alu.alu_types):
            return EngineLimits("alu_engine", alu.channel_parallel, alu.kernel_size, alu.stride,
                                alu.pad, alu.nonlinear, alu.weight_bank)
        if self.dwconv is not None:
            dw = self.dwconv
            return EngineLimits("dwconv_engine", dw.channel_parallel, dw.kernel_size, dw.stride,
                                None, dw.nonlinear, dw.weight_bank)
        return None

    def pool_limits(self, kind: str) -> Optional[EngineLimits]:
        """Limits for a pool, ``kind`` "max" or "avg"; None when no engine runs that pool.

        DPUCV2DX8G's ALU ``comp_temp`` (compare template) is read as max pool and ``macc_temp``
        as average pool: an inference, as in :meth:`depthwise_limits`.
        """
        alu = self.alu
        if alu is not None:
            alu_kinds = {"max": ("max_pool", "comp_temp"), "avg": ("avg_pool", "macc_temp")}[kind]
            if any(t in alu.alu_types for t in alu_kinds):
                return EngineLimits("alu_engine", alu.channel_parallel, alu.kernel_size,
                                    alu.stride, alu.pad, (), None)
            return None
        pool = self.pool
        if pool is not None and kind in pool.pool_types:
            kernel, stride = ((pool.max_kernel_size, pool.max_stride) if kind == "max"
                              else (pool.avg_kernel_size, pool.avg_stride))
            return EngineLimits("pool_engine", pool.channel_parallel, kernel, stride, None, (), None)
        return None

    def eltwise_for(self, kind: str) -> Optional[Tuple[str, Tuple[str, ...]]]:
        """(engine name, fusable nonlinear types) of the engine that runs element-wise ``kind``
        ("add" or "mult"), or None. DPUCV2DX8G runs them on its ALU (``elew_add``/``elew_mult``)."""
        if self.eltwise is not None and kind in self.eltwise.elew_types:
            return "eltwise_engine", self.eltwise.nonlinear
        if self.alu is not None and "elew_" + kind in self.alu.alu_types:
            return "alu_engine", self.alu.nonlinear
        return None


def allows(spec: str, value: int) -> bool:
    """True when ``value`` lies in a prototxt range string such as "1-16", "1,2,3,5,7" or "1-3,7"."""
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        if int(low) <= value <= int(high or low):
            return True
    return False


# Shared lists (identical in every prototxt of the family that uses them).
_PAD_LIMIT = ("0-15", "0-255", "0-15", "0-255")
_NL_RELU_LEAKY_RELU6 = ("relu", "leaky_relu", "relu_six")
_NL_ALL = ("relu", "leaky_relu", "hsigmoid", "hswish", "relu_six")
_NL_RELU_RELU6 = ("relu", "relu_six")
_ALU_TYPES_ISA = ("dwconv", "prelu", "avg_pool", "max_pool", "leaky_relu", "max_reduce",
                  "dwconv_no_bias", "hsigmoid", "w16b0")
_ALU_TYPES_V2 = ("macc_temp", "comp_temp", "elew_add", "elew_mult")
_POOL_AHX8H = PoolEngine(16, 1, ("max", "avg"), "1-8", "1-8", "1-8", "1-8")

TARGETS: Dict[str, DpuEngines] = {
    # MPSoC (ZCU102, ZCU104, KV260): B<n> = 2 x pixel_parallel x input x output channel parallel.
    "DPUCZDX8G_ISA1_B512": DpuEngines(
        "DPUCZDX8G_ISA1_B512", "DPUCZDX8G", 1, 8,
        conv=ConvEngine(8, 8, 4, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 8, 8, 2048)),
        eltwise=EltwiseEngine(8, 2, ("add", "mult"), ("relu",)),
        alu=AluEngine(8, 2, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 8, 2048))),
    "DPUCZDX8G_ISA1_B800": DpuEngines(
        "DPUCZDX8G_ISA1_B800", "DPUCZDX8G", 1, 10,
        conv=ConvEngine(10, 10, 4, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 10, 10, 2048)),
        eltwise=EltwiseEngine(10, 2, ("add", "mult"), ("relu",)),
        alu=AluEngine(10, 2, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 10, 2048))),
    "DPUCZDX8G_ISA1_B1024": DpuEngines(
        "DPUCZDX8G_ISA1_B1024", "DPUCZDX8G", 1, 8,
        conv=ConvEngine(8, 8, 8, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 8, 8, 2048)),
        eltwise=EltwiseEngine(8, 4, ("add", "mult"), ("relu",)),
        alu=AluEngine(8, 4, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 8, 2048))),
    "DPUCZDX8G_ISA1_B1152": DpuEngines(
        "DPUCZDX8G_ISA1_B1152", "DPUCZDX8G", 1, 12,
        conv=ConvEngine(12, 12, 4, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 12, 12, 2048)),
        eltwise=EltwiseEngine(12, 2, ("add", "mult"), ("relu",)),
        alu=AluEngine(12, 2, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 12, 2048))),
    "DPUCZDX8G_ISA1_B1600": DpuEngines(
        "DPUCZDX8G_ISA1_B1600", "DPUCZDX8G", 1, 10,
        conv=ConvEngine(10, 10, 8, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 10, 10, 2048)),
        eltwise=EltwiseEngine(10, 4, ("add", "mult"), ("relu",)),
        alu=AluEngine(10, 4, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 10, 2048))),
    "DPUCZDX8G_ISA1_B2304": DpuEngines(
        "DPUCZDX8G_ISA1_B2304", "DPUCZDX8G", 1, 12,
        conv=ConvEngine(12, 12, 8, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 12, 12, 2048)),
        eltwise=EltwiseEngine(12, 4, ("add", "mult"), ("relu",)),
        alu=AluEngine(12, 4, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 12, 2048))),
    "DPUCZDX8G_ISA1_B3136": DpuEngines(
        "DPUCZDX8G_ISA1_B3136", "DPUCZDX8G", 1, 14,
        conv=ConvEngine(14, 14, 8, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 14, 14, 2048)),
        eltwise=EltwiseEngine(14, 4, ("add", "mult"), ("relu",)),
        alu=AluEngine(14, 4, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 14, 2048))),
    "DPUCZDX8G_ISA1_B4096": DpuEngines(
        "DPUCZDX8G_ISA1_B4096", "DPUCZDX8G", 1, 16,
        conv=ConvEngine(16, 16, 8, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 16, 16, 2048)),
        eltwise=EltwiseEngine(16, 4, ("add", "mult"), ("relu",)),
        alu=AluEngine(16, 4, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 16, 2048))),
    # Versal AI Core (VCK190): C<32|64> = output channel parallelism, B<n> = batch (DPU cores).
    "DPUCVDX8G_ISA3_C32B1": DpuEngines(
        "DPUCVDX8G_ISA3_C32B1", "DPUCVDX8G", 1, 16,
        conv=ConvEngine(16, 32, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
        eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
        alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 16, 8192))),
    "DPUCVDX8G_ISA3_C32B3": DpuEngines(
        "DPUCVDX8G_ISA3_C32B3", "DPUCVDX8G", 3, 16,
        conv=ConvEngine(16, 32, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
        eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
        alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 16, 8192))),
    "DPUCVDX8G_ISA3_C32B6": DpuEngines(
        "DPUCVDX8G_ISA3_C32B6", "DPUCVDX8G", 6, 16,
        conv=ConvEngine(16, 32, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
        eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
        alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 16, 8192))),
    "DPUCVDX8G_ISA3_C64B1": DpuEngines(
        "DPUCVDX8G_ISA3_C64B1", "DPUCVDX8G", 1, 16,
        conv=ConvEngine(16, 64, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
        eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
        alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 16, 8192))),
    "DPUCVDX8G_ISA3_C64B3": DpuEngines(
        "DPUCVDX8G_ISA3_C64B3", "DPUCVDX8G", 3, 16,
        conv=ConvEngine(16, 64, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
        eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
        alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 16, 8192))),
    "DPUCVDX8G_ISA3_C64B5": DpuEngines(
        "DPUCVDX8G_ISA3_C64B5", "DPUCVDX8G", 5, 16,
        conv=ConvEngine(16, 64, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
        eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
        alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                      Bank("DWCONVW", 1, 16, 8192))),
    # Versal AI Edge (VEK280) and V70: one ALU runs depthwise conv, pools and element-wise ops.
    "DPUCV2DX8G_ISA1_C20B1": DpuEngines(
        "DPUCV2DX8G_ISA1_C20B1", "DPUCV2DX8G", 1, 32,
        conv=ConvEngine(32, 32, 4, "1-16", "1-16", _NL_ALL, Bank("CONVW", 4, 16, 32768)),
        alu=AluEngine(32, 2, _ALU_TYPES_V2, _NL_ALL, "1-256", "1-256", _PAD_LIMIT,
                      Bank("CONVW", 4, 16, 32768))),
    "DPUCV2DX8G_ISA1_C20B14": DpuEngines(
        "DPUCV2DX8G_ISA1_C20B14", "DPUCV2DX8G", 14, 32,
        conv=ConvEngine(32, 32, 4, "1-16", "1-16", _NL_ALL, Bank("CONVW", 4, 16, 32768)),
        alu=AluEngine(32, 2, _ALU_TYPES_V2, _NL_ALL, "1-256", "1-256", _PAD_LIMIT,
                      Bank("CONVW", 4, 16, 32768))),
    # Alveo U50/U50LV/U55C/U280: pool engine instead of an ALU; only _DWC has depthwise conv.
    "DPUCAHX8H_ISA2": DpuEngines(
        "DPUCAHX8H_ISA2", "DPUCAHX8H", 1, 16,
        conv=ConvEngine(16, 16, 8, "1-16", "1-4", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 16, 16, 2048)),
        eltwise=EltwiseEngine(16, 1, ("add",), ("relu",)),
        pool=_POOL_AHX8H),
    "DPUCAHX8H_ISA2_DWC": DpuEngines(
        "DPUCAHX8H_ISA2_DWC", "DPUCAHX8H", 1, 16,
        conv=ConvEngine(16, 16, 8, "1-16", "1-4", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 16, 16, 2048)),
        eltwise=EltwiseEngine(16, 1, ("add",), ("relu",)),
        pool=_POOL_AHX8H,
        dwconv=DwconvEngine(16, 2, "1,2,3,5,7", "1-4", _NL_RELU_RELU6, Bank("DWCONVW", 1, 16, 2048))),
    "DPUCAHX8H_ISA2_ELP2": DpuEngines(
        "DPUCAHX8H_ISA2_ELP2", "DPUCAHX8H", 1, 16,
        conv=ConvEngine(16, 16, 8, "1-16", "1-4", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 16, 16, 2048)),
        eltwise=EltwiseEngine(16, 2, ("add",), ("relu",)),
        pool=_POOL_AHX8H),
}


def get_target(name: str) -> DpuEngines:
    """The engine parameters of DPU target ``name`` (exact, case-sensitive, as in docs/targets.md#names-and-fingerprints).

    Raises:
        ConfigError: the name is not in :data:`TARGETS`; the message lists the valid names and
            the closest match.
    """
    target = TARGETS.get(name)
    if target is not None:
        return target
    upper = {key.upper(): key for key in TARGETS}
    close = difflib.get_close_matches(str(name).upper(), list(upper), n=1, cutoff=0.0)
    hint = "did you mean {!r}? ".format(upper[close[0]]) if close else ""
    raise ConfigError(
        "unknown DPU target {!r} for inspection: {}valid names are {}".format(
            name, hint, ", ".join(sorted(TARGETS))))
