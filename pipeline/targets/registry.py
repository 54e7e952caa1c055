"""The one registry of DPU targets: name, family, boards, fingerprints, ``arch.json`` paths, engines.

Sources (docs/targets.md#names-and-fingerprints, docs/targets.md#archjson):

- Fingerprint = ``(type_id << 56) | (isa_version << 48) | feature_code``
  (``src/vai_runtime/target_factory/src/target_factory.cpp``). The values below were computed from
  ``src/vai_runtime/target_factory/targets/*.prototxt`` (Vitis AI 3.0 and 3.5 give the same values) and
  from ``src/Vitis-AI-Runtime/VART/target_factory/targets/*.prototxt`` at tag v2.5 for
  ``fingerprint_2_5``. A model compiled with one fingerprint does not run on a board image with the
  other ("CHECK fingerprint fail", Vitis-AI issues #1072, #1149, #1195).
- Boards: UG1414 3.0 "Currently Supported Operators" and the 3.5 quickstarts (MPSoC boards ZCU102,
  ZCU104 and KV260 all use ``DPUCZDX8G_ISA1_B4096``; VEK280 and V70 use ``DPUCV2DX8G_ISA1_C20B14``).
- ``arch.json`` paths: the image copies ``site-packages/vaic/arch`` to ``/opt/vitis_ai/compiler/arch``
  (``docker/common/install_torch.sh``); per-board paths from the repo docs (section 3.3). Paths marked
  third-party there are kept, unverified ones (U50LV) are left out.
- Engine parameters (``pipeline.targets.engines``) from the same target prototxts, for the targets
  the inspection rules know; None for the others.
- The Vitis AI release a family's boards run and the image that compiles for it: one row per family in
  ``pipeline.targets.releases`` (docs/targets.md#releases-and-images), read through ``DpuTarget``.
"""
import difflib
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..errors import ConfigError
from .engines import (AluEngine, Bank, ConvEngine, DwconvEngine, EltwiseEngine, Engines,
                      PoolEngine)
from .releases import FAMILY_RELEASES, RELEASES, FamilyRelease, compile_image

ARCH_ROOT = "/opt/vitis_ai/compiler/arch"


@dataclass(frozen=True)
class DpuTarget:
    """One DPU target.

    ``fingerprint`` is the Vitis AI 3.x value, ``fingerprint_2_5`` the 2.5 one (None: not in 2.5);
    ``arch_json_by_board`` maps a board to its ``arch.json`` path inside the image (empty when none
    is documented); ``engines`` holds the engine parameters, or None where the inspection rules
    have none for this target.
    """

    name: str
    family: str
    boards: Tuple[str, ...]
    fingerprint: int
    fingerprint_2_5: Optional[int]
    arch_json_by_board: Dict[str, str]
    engines: Optional[Engines] = None

    @property
    def arch_json(self) -> Optional[str]:
        """The default ``arch.json`` path in the image (the first board's), or None."""
        return next(iter(self.arch_json_by_board.values()), None)

    @property
    def release(self) -> FamilyRelease:
        """The family's row of ``releases.FAMILY_RELEASES``: board release, compile release, source."""
        return FAMILY_RELEASES[self.family]

    @property
    def board_release(self) -> Optional[str]:
        """The Vitis AI release the target's boards run (``"3.0"``, ``"3.5"``, ...), None when unknown."""
        return self.release.board_release

    @property
    def compile_image(self) -> Optional[str]:
        """The pinned image whose ``vai_c_xir`` compiles for this target, None when none is known."""
        image, known = compile_image(self.family)
        return image if known else None


# Shared lists (identical in every prototxt of the family that uses them).
_PAD_LIMIT = ("0-15", "0-255", "0-15", "0-255")
_NL_RELU_LEAKY_RELU6 = ("relu", "leaky_relu", "relu_six")
_NL_ALL = ("relu", "leaky_relu", "hsigmoid", "hswish", "relu_six")
_NL_RELU_RELU6 = ("relu", "relu_six")
_ALU_TYPES_ISA = ("dwconv", "prelu", "avg_pool", "max_pool", "leaky_relu", "max_reduce",
                  "dwconv_no_bias", "hsigmoid", "w16b0")
_ALU_TYPES_V2 = ("macc_temp", "comp_temp", "elew_add", "elew_mult")
_POOL_AHX8H = PoolEngine(16, 1, ("max", "avg"), "1-8", "1-8", "1-8", "1-8")

TARGETS = {
    # MPSoC (ZCU102, ZCU104, KV260): B<n> = 2 x pixel_parallel x input x output channel parallel.
    "DPUCZDX8G_ISA1_B512": DpuTarget(
        "DPUCZDX8G_ISA1_B512", "DPUCZDX8G", boards=(),
        fingerprint=0x0101000056010200, fingerprint_2_5=0x0101000016010200,
        arch_json_by_board={},
        engines=Engines(1, 8,
            conv=ConvEngine(8, 8, 4, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 8, 8, 2048)),
            eltwise=EltwiseEngine(8, 2, ("add", "mult"), ("relu",)),
            alu=AluEngine(8, 2, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 8, 2048)))),
    "DPUCZDX8G_ISA1_B800": DpuTarget(
        "DPUCZDX8G_ISA1_B800", "DPUCZDX8G", boards=(),
        fingerprint=0x0101000056010201, fingerprint_2_5=0x0101000016010201,
        arch_json_by_board={},
        engines=Engines(1, 10,
            conv=ConvEngine(10, 10, 4, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 10, 10, 2048)),
            eltwise=EltwiseEngine(10, 2, ("add", "mult"), ("relu",)),
            alu=AluEngine(10, 2, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 10, 2048)))),
    "DPUCZDX8G_ISA1_B1024": DpuTarget(
        "DPUCZDX8G_ISA1_B1024", "DPUCZDX8G", boards=(),
        fingerprint=0x0101000056010402, fingerprint_2_5=0x0101000016010402,
        arch_json_by_board={},
        engines=Engines(1, 8,
            conv=ConvEngine(8, 8, 8, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 8, 8, 2048)),
            eltwise=EltwiseEngine(8, 4, ("add", "mult"), ("relu",)),
            alu=AluEngine(8, 4, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 8, 2048)))),
    "DPUCZDX8G_ISA1_B1152": DpuTarget(
        "DPUCZDX8G_ISA1_B1152", "DPUCZDX8G", boards=(),
        fingerprint=0x0101000056010203, fingerprint_2_5=0x0101000016010203,
        arch_json_by_board={},
        engines=Engines(1, 12,
            conv=ConvEngine(12, 12, 4, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 12, 12, 2048)),
            eltwise=EltwiseEngine(12, 2, ("add", "mult"), ("relu",)),
            alu=AluEngine(12, 2, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 12, 2048)))),
    "DPUCZDX8G_ISA1_B1600": DpuTarget(
        "DPUCZDX8G_ISA1_B1600", "DPUCZDX8G", boards=(),
        fingerprint=0x0101000056010404, fingerprint_2_5=0x0101000016010404,
        arch_json_by_board={},
        engines=Engines(1, 10,
            conv=ConvEngine(10, 10, 8, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 10, 10, 2048)),
            eltwise=EltwiseEngine(10, 4, ("add", "mult"), ("relu",)),
            alu=AluEngine(10, 4, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 10, 2048)))),
    "DPUCZDX8G_ISA1_B2304": DpuTarget(
        "DPUCZDX8G_ISA1_B2304", "DPUCZDX8G", boards=(),
        fingerprint=0x0101000056010405, fingerprint_2_5=0x0101000016010405,
        arch_json_by_board={},
        engines=Engines(1, 12,
            conv=ConvEngine(12, 12, 8, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 12, 12, 2048)),
            eltwise=EltwiseEngine(12, 4, ("add", "mult"), ("relu",)),
            alu=AluEngine(12, 4, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 12, 2048)))),
    "DPUCZDX8G_ISA1_B3136": DpuTarget(
        "DPUCZDX8G_ISA1_B3136", "DPUCZDX8G", boards=(),
        fingerprint=0x0101000056010406, fingerprint_2_5=0x0101000016010406,
        arch_json_by_board={},
        engines=Engines(1, 14,
            conv=ConvEngine(14, 14, 8, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 14, 14, 2048)),
            eltwise=EltwiseEngine(14, 4, ("add", "mult"), ("relu",)),
            alu=AluEngine(14, 4, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 14, 2048)))),
    "DPUCZDX8G_ISA1_B4096": DpuTarget(
        "DPUCZDX8G_ISA1_B4096", "DPUCZDX8G", boards=("ZCU102", "ZCU104", "KV260"),
        fingerprint=0x0101000056010407, fingerprint_2_5=0x0101000016010407,
        arch_json_by_board={"ZCU102": ARCH_ROOT + "/DPUCZDX8G/ZCU102/arch.json",
                            "ZCU104": ARCH_ROOT + "/DPUCZDX8G/ZCU104/arch.json",
                            "KV260": ARCH_ROOT + "/DPUCZDX8G/KV260/arch.json"},
        engines=Engines(1, 16,
            conv=ConvEngine(16, 16, 8, "1-16", "1-8", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 16, 16, 2048)),
            eltwise=EltwiseEngine(16, 4, ("add", "mult"), ("relu",)),
            alu=AluEngine(16, 4, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 16, 2048)))),
    # Versal AI Core (VCK190): C<32|64> = output channel parallelism, B<n> = batch (DPU cores).
    "DPUCVDX8G_ISA3_C32B1": DpuTarget(
        "DPUCVDX8G_ISA3_C32B1", "DPUCVDX8G", boards=(),
        fingerprint=0x0603000B56011811, fingerprint_2_5=0x0603000B16011811,
        arch_json_by_board={},
        engines=Engines(1, 16,
            conv=ConvEngine(16, 32, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
            eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
            alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 16, 8192)))),
    "DPUCVDX8G_ISA3_C32B3": DpuTarget(
        "DPUCVDX8G_ISA3_C32B3", "DPUCVDX8G", boards=("VCK190",),
        fingerprint=0x0603000B56011831, fingerprint_2_5=0x0603000B16011831,
        arch_json_by_board={"VCK190": ARCH_ROOT + "/DPUCVDX8G/VCK190/arch.json"},
        engines=Engines(3, 16,
            conv=ConvEngine(16, 32, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
            eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
            alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 16, 8192)))),
    "DPUCVDX8G_ISA3_C32B6": DpuTarget(
        "DPUCVDX8G_ISA3_C32B6", "DPUCVDX8G", boards=(),
        fingerprint=0x0603000B56011861, fingerprint_2_5=0x0603000B16011861,
        arch_json_by_board={},
        engines=Engines(6, 16,
            conv=ConvEngine(16, 32, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
            eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
            alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 16, 8192)))),
    "DPUCVDX8G_ISA3_C64B1": DpuTarget(
        "DPUCVDX8G_ISA3_C64B1", "DPUCVDX8G", boards=(),
        fingerprint=0x0603000B56011812, fingerprint_2_5=0x0603000B16011812,
        arch_json_by_board={},
        engines=Engines(1, 16,
            conv=ConvEngine(16, 64, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
            eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
            alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 16, 8192)))),
    "DPUCVDX8G_ISA3_C64B3": DpuTarget(
        "DPUCVDX8G_ISA3_C64B3", "DPUCVDX8G", boards=(),
        fingerprint=0x0603000B56011832, fingerprint_2_5=0x0603000B16011832,
        arch_json_by_board={},
        engines=Engines(3, 16,
            conv=ConvEngine(16, 64, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
            eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
            alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 16, 8192)))),
    "DPUCVDX8G_ISA3_C64B5": DpuTarget(
        "DPUCVDX8G_ISA3_C64B5", "DPUCVDX8G", boards=(),
        fingerprint=0x0603000B56011852, fingerprint_2_5=0x0603000B16011852,
        arch_json_by_board={},
        engines=Engines(5, 16,
            conv=ConvEngine(16, 64, 8, "1-16", "1-8", _NL_ALL, Bank("CONVW", 16, 16, 8192)),
            eltwise=EltwiseEngine(16, 8, ("add", "mult"), ("relu",)),
            alu=AluEngine(16, 8, _ALU_TYPES_ISA, _NL_RELU_RELU6, "1-256", "1-256", _PAD_LIMIT,
                          Bank("DWCONVW", 1, 16, 8192)))),
    # Alveo U50/U50LV/U55C/U280: pool engine instead of an ALU; only _DWC has depthwise conv.
    "DPUCAHX8H_ISA2": DpuTarget(
        "DPUCAHX8H_ISA2", "DPUCAHX8H", boards=(),
        fingerprint=0x020200000010002A, fingerprint_2_5=0x020200000010002A,
        arch_json_by_board={},
        engines=Engines(1, 16,
            conv=ConvEngine(16, 16, 8, "1-16", "1-4", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 16, 16, 2048)),
            eltwise=EltwiseEngine(16, 1, ("add",), ("relu",)),
            pool=_POOL_AHX8H)),
    "DPUCAHX8H_ISA2_DWC": DpuTarget(
        "DPUCAHX8H_ISA2_DWC", "DPUCAHX8H", boards=("U50", "U55C", "U50LV", "U280"),
        fingerprint=0x020200000010002B, fingerprint_2_5=0x020200000010002B,
        arch_json_by_board={"U50": ARCH_ROOT + "/DPUCAHX8H/U50/arch.json",
                            "U55C": ARCH_ROOT + "/DPUCAHX8H/U55C-DWC/arch.json",
                            "U280": ARCH_ROOT + "/DPUCAHX8H/U280/arch.json"},
        engines=Engines(1, 16,
            conv=ConvEngine(16, 16, 8, "1-16", "1-4", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 16, 16, 2048)),
            eltwise=EltwiseEngine(16, 1, ("add",), ("relu",)),
            pool=_POOL_AHX8H,
            dwconv=DwconvEngine(16, 2, "1,2,3,5,7", "1-4", _NL_RELU_RELU6, Bank("DWCONVW", 1, 16, 2048)))),
    "DPUCAHX8H_ISA2_ELP2": DpuTarget(
        "DPUCAHX8H_ISA2_ELP2", "DPUCAHX8H", boards=(),
        fingerprint=0x020200000000002E, fingerprint_2_5=0x020200000000002E,
        arch_json_by_board={},
        engines=Engines(1, 16,
            conv=ConvEngine(16, 16, 8, "1-16", "1-4", _NL_RELU_LEAKY_RELU6, Bank("CONVW", 16, 16, 2048)),
            eltwise=EltwiseEngine(16, 2, ("add",), ("relu",)),
            pool=_POOL_AHX8H)),
    # Alveo (DPUCAHX8L, DPUCADF8H) and VCK5000 (DPUCVDX8H): no engine parameters here, so no inspection.
    "DPUCAHX8L_ISA0": DpuTarget(
        "DPUCAHX8L_ISA0", "DPUCAHX8L", boards=("U50", "U50LV", "U280"),
        fingerprint=0x030000000000001D, fingerprint_2_5=0x030000000000001D,
        arch_json_by_board={"U280": ARCH_ROOT + "/DPUCAHX8L/U280/arch.json"}),
    "DPUCAHX8L_ISA0_SP": DpuTarget(
        "DPUCAHX8L_ISA0_SP", "DPUCAHX8L", boards=(),
        fingerprint=0x030000000000101D, fingerprint_2_5=0x030000000000101D,
        arch_json_by_board={}),
    "DPUCADF8H_ISA0": DpuTarget(
        "DPUCADF8H_ISA0", "DPUCADF8H", boards=("U200", "U250"),
        fingerprint=0x0700000000000000, fingerprint_2_5=0x0700000000000000,
        arch_json_by_board={"U200": ARCH_ROOT + "/DPUCADF8H/U200/arch.json",
                            "U250": ARCH_ROOT + "/DPUCADF8H/U250/arch.json"}),
    "DPUCVDX8H_ISA1_F2W2_8PE": DpuTarget(
        "DPUCVDX8H_ISA1_F2W2_8PE", "DPUCVDX8H", boards=("VCK5000",),
        fingerprint=0x0501000000140FEE, fingerprint_2_5=0x0501000000140FEE,
        arch_json_by_board={"VCK5000": ARCH_ROOT + "/DPUCVDX8H/VCK50008PE/arch.json"}),
    "DPUCVDX8H_ISA1_F2W4_4PE": DpuTarget(
        "DPUCVDX8H_ISA1_F2W4_4PE", "DPUCVDX8H", boards=("VCK5000",),
        fingerprint=0x05010000001E082F, fingerprint_2_5=0x05010000001E082F,
        arch_json_by_board={}),
    "DPUCVDX8H_ISA1_F2W4_6PE_aieDWC": DpuTarget(
        "DPUCVDX8H_ISA1_F2W4_6PE_aieDWC", "DPUCVDX8H", boards=(),
        fingerprint=0x0501000000160C2F, fingerprint_2_5=0x0501000000160C2F,
        arch_json_by_board={}),
    "DPUCVDX8H_ISA1_F2W4_6PE_aieMISC": DpuTarget(
        "DPUCVDX8H_ISA1_F2W4_6PE_aieMISC", "DPUCVDX8H", boards=(),
        fingerprint=0x05010000001E082E, fingerprint_2_5=0x05010000001E082E,
        arch_json_by_board={}),
    # Versal AI Edge (VEK280) and V70: one ALU runs depthwise conv, pools and element-wise ops.
    "DPUCV2DX8G_ISA1_C20B1": DpuTarget(
        "DPUCV2DX8G_ISA1_C20B1", "DPUCV2DX8G", boards=(),
        fingerprint=0x0901400044000144, fingerprint_2_5=None,
        arch_json_by_board={},
        engines=Engines(1, 32,
            conv=ConvEngine(32, 32, 4, "1-16", "1-16", _NL_ALL, Bank("CONVW", 4, 16, 32768)),
            alu=AluEngine(32, 2, _ALU_TYPES_V2, _NL_ALL, "1-256", "1-256", _PAD_LIMIT,
                          Bank("CONVW", 4, 16, 32768)))),
    "DPUCV2DX8G_ISA1_C20B14": DpuTarget(
        "DPUCV2DX8G_ISA1_C20B14", "DPUCV2DX8G", boards=("VEK280", "V70"),
        fingerprint=0x0901400044000E44, fingerprint_2_5=None,
        arch_json_by_board={"VEK280": ARCH_ROOT + "/DPUCV2DX8G/VEK280/arch.json",
                            "V70": ARCH_ROOT + "/DPUCV2DX8G/V70/arch.json"},
        engines=Engines(14, 32,
            conv=ConvEngine(32, 32, 4, "1-16", "1-16", _NL_ALL, Bank("CONVW", 4, 16, 32768)),
            alu=AluEngine(32, 2, _ALU_TYPES_V2, _NL_ALL, "1-256", "1-256", _PAD_LIMIT,
                          Bank("CONVW", 4, 16, 32768)))),
    # Demo targets: no engine parameters.
    "DPUCZDI4G_ISA0_B4096_DEMO_SSD": DpuTarget(
        "DPUCZDI4G_ISA0_B4096_DEMO_SSD", "DPUCZDI4G", boards=(),
        fingerprint=0x0400002003220206, fingerprint_2_5=0x0400002003220206,
        arch_json_by_board={}),
    "DPUCZDI4G_ISA0_B8192D8_DEMO_SSD": DpuTarget(
        "DPUCZDI4G_ISA0_B8192D8_DEMO_SSD", "DPUCZDI4G", boards=(),
        fingerprint=0x0400002003220207, fingerprint_2_5=0x0400002003220207,
        arch_json_by_board={}),
}  # type: Dict[str, DpuTarget]


def hex_fingerprint(value: Optional[int]) -> str:
    """Format a 64-bit fingerprint as ``0x`` + 16 lower-case hex digits; ``-`` for None."""
    return "-" if value is None else "0x%016x" % value


def get_target(name: str) -> DpuTarget:
    """The registry entry of DPU target ``name`` (exact, case-sensitive).

    Raises:
        ConfigError: unknown name. The one closest-match rule of the package: the message names
            the closest registered names, compared case-insensitively, and says where the full list
            is. Expired ISA0 names such as ``DPUCZDX8G_ISA0_B4096_MAX_BG2`` are rejected by Vitis AI
            3.x too (docs/targets.md#expired-names).
    """
    target = TARGETS.get(name)
    if target is not None:
        return target
    upper = {key.upper(): key for key in TARGETS}
    close = [upper[c] for c in difflib.get_close_matches(str(name).upper(), list(upper), n=3, cutoff=0.6)]
    hint = "; did you mean %r? (closest: %s)" % (close[0], ", ".join(close)) if close else ""
    expired = (" (ISA0 names expired with Vitis AI 3.x)" if "_ISA0_" in str(name) and str(name).startswith("DPUCZDX8G")
               else "")
    raise ConfigError("target: expected a DPU target name of Vitis AI 3.x, got %r%s%s. "
                      "`python -m pipeline targets` lists them all" % (name, expired, hint))


def targets_by_fingerprint(fingerprint: int) -> List[Tuple[str, str]]:
    """All ``(target name, release)`` pairs whose fingerprint equals ``fingerprint``.

    ``release`` is ``"3.x"`` or ``"2.5"``. Several names can share one fingerprint across releases
    (the Alveo targets kept theirs), so the result is a list, in registry order.
    """
    found = []
    for name, entry in TARGETS.items():
        if entry.fingerprint == fingerprint:
            found.append((name, "3.x"))
        if entry.fingerprint_2_5 == fingerprint and entry.fingerprint_2_5 != entry.fingerprint:
            found.append((name, "2.5"))
    return found


def format_targets() -> str:
    """A plain-text table of the registry for ``python -m pipeline targets``: one line per target
    with family, fingerprint (3.x), fingerprint (2.5), boards, the Vitis AI release the boards run and
    the release whose image compiles for it (``?``: unknown); then the ``arch.json`` paths, the images
    and, per family, the sources of its releases."""
    header = ("target", "family", "fingerprint 3.x", "fingerprint 2.5", "boards", "boards run", "compiles in")
    rows = [header]
    for name, e in TARGETS.items():
        rows.append((name, e.family, hex_fingerprint(e.fingerprint), hex_fingerprint(e.fingerprint_2_5),
                     ",".join(e.boards) or "-", e.release.board_release or "?", e.release.compile_release or "?"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("")
    lines.append("arch.json inside the Vitis AI image (%s):" % ARCH_ROOT)
    for name, e in TARGETS.items():
        for board, path in e.arch_json_by_board.items():
            lines.append("  %-24s %-8s %s" % (name, board, path))
    lines.append("")
    lines.append("Vitis AI images (compile.sh, compile_plan.md and scripts/docker_run.sh use them):")
    for version, r in RELEASES.items():
        lines.append("  %-4s %s  (Python %s, torch %s)" % (version, r.image, r.python, r.torch))
    lines.append("")
    lines.append("Releases per family (boards run / compiles in), and their sources:")
    for family in sorted({e.family for e in TARGETS.values()}):
        f = FAMILY_RELEASES[family]
        images = "".join("; %s: %s" % kv for kv in f.board_images.items())
        lines.append("  %-10s %s / %s: %s%s" % (family, f.board_release or "?", f.compile_release or "?", f.source,
                                                images))
    return "\n".join(lines) + "\n"
