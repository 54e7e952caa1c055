"""Engine parameters of a DPU target: the engines that run each operation and their limits.

Source: the target descriptions ``src/vai_runtime/target_factory/targets/<name>.prototxt`` of
github.com/Xilinx/Vitis-AI (master = 3.5; identical in v3.0 where the target exists); see
docs/targets.md#dpuczdx8g-operator-limits. Only the fields the inspection rules use are kept: the conv
engine (channel and pixel parallelism, kernel/stride limits, fusable nonlinear types, weight bank),
the eltwise, ALU, pool and depthwise-conv engines (types, limits, fusable nonlinear types), the
load engine's channel parallelism and the batch (number of DPU cores the name's ``B<n>`` suffix
gives for DPUCVDX8G and DPUCV2DX8G).

Limits are kept as the prototxt writes them ("1-16", "1,2,3,5,7"); :func:`allows` reads them.
"""

from dataclasses import dataclass
from typing import Optional, Tuple


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
class Engines:
    """The engines of one DPU target (the optional ``engines`` part of its registry entry).

    The helper methods answer "which engine runs this operation, under which limits" the way the
    quantizer's inspector reads a target (vai_q_pytorch ``pytorch_nndct/hardware/dpu_op_filter.py``):
    an ALU engine, where present, runs depthwise conv and pools; otherwise the dedicated pool or
    depthwise engine does.
    """

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
