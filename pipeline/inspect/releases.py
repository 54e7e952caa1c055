"""The differences between Vitis AI 3.0 and 3.5 that a model meets, found on its graph.

The pipeline reproduces the 3.5 quantizer and writes its xmodel, but the DPUCZDX8G (ZCU102, ZCU104,
KV260), DPUCVDX8G (VCK190) and DPUCVDX8H (VCK5000) boards run Vitis AI 3.0 (``DpuTarget.board_release``,
docs/targets.md#releases-and-images), whose quantizer and compiler read some models differently. One
row per difference, in one literal table: which node meets it (a test on the inspection trace's
``OpNode``), what differs, what to do, and where both releases' source shows it
(docs/targets.md#vitis-ai-30-and-35-differences). Only differences the float graph shows and that were
read in the source of both releases are here; that section lists the others and why they are not.
"""
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from pipeline.errors import PipelineError
from pipeline.targets import DpuTarget

from .trace import OpNode, TracedModel, trace_model

# The release whose differences from 3.5 the table lists: targets whose boards run it get the warnings.
BOARD_RELEASE = "3.0"


@dataclass(frozen=True)
class Difference:
    """One 3.0/3.5 difference: ``meets(node)`` says how the node meets it (None: it does not)."""

    key: str
    meets: Callable[[OpNode], Optional[str]]
    differs: str
    todo: str
    source: str


def _depthwise_multiplier(node: OpNode) -> Optional[str]:
    if node.op != "depthwise_conv2d" or node.attrs["out_channels"] == node.attrs["in_channels"]:
        return None
    return "a depthwise conv with channel multiplier %d (groups = in_channels = %d, out_channels = %d)" % (
        node.attrs["out_channels"] // node.attrs["in_channels"], node.attrs["in_channels"], node.attrs["out_channels"])


def _split(node: OpNode) -> Optional[str]:
    return "a %s of one tensor into pieces" % node.op if node.op in ("chunk", "split") else None


def _sqrt(node: OpNode) -> Optional[str]:
    return "a square root" if node.op in ("sqrt", "sqrt_") else None


def _conv3d(node: OpNode) -> Optional[str]:
    return "a 3-D convolution" if node.op == "conv3d" else None


DIFFERENCES = (
    Difference(
        "depthwise_multiplier", _depthwise_multiplier,
        "Vitis AI 3.5's quantizer makes it a depthwise conv (XIR depthwise-conv2d); 3.0's takes only multiplier 1 "
        "as depthwise and makes it a grouped conv2d, which cross-layer equalization scales differently, so a 3.0 "
        "quantization can give other numbers, and the compiler gets another op",
        "check the compiled model's DPU/CPU split (xir subgraph) and its accuracy on the board; a multiplier-1 "
        "depthwise conv followed by a 1x1 conv reads the same in both releases",
        "pytorch_nndct/parse/op_dispatcher.py (_convolution) at v3.0 and v3.5"),
    Difference(
        "split_chunk", _split,
        "Vitis AI 3.5's quantizer turns it into slices (strided_slice ops in the xmodel); 3.0's keeps one node "
        "with several outputs and, when all of them are used, writes no xmodel (\"XIR don't support "
        "multi-outputs op\")",
        "nothing for the xmodel written here, which holds the slices; to quantize the model with the 3.0 tools, "
        "write the pieces as slices (x[:, :k], x[:, k:])",
        "pytorch_nndct/parse/override_torch_function.py (new in v3.5), nndct_shared/compile/xir_compiler.py "
        "(verify_nndct_graph, v3.0), release_notes.rst at v3.5"),
    Difference(
        "sqrt", _sqrt,
        "Vitis AI 3.5's quantizer gives it an op of its own (nndct_sqrt) and quantizes its output; 3.0's has no "
        "sqrt op and leaves it a float operator without a fix position",
        "expect the values after this node to differ from a 3.0 quantization; it is not a DPU op in either "
        "release",
        "nndct_shared/nndct_graph/nndctgraph_holder.py (QUANTIZABLE_OPS) and pytorch_nndct/parse/op_dispatcher.py "
        "(sqrt) at v3.5; nndct_shared/base/key_names.py at v3.0 (no SQRT)"),
    Difference(
        "conv3d", _conv3d,
        "Vitis AI 3.5's quantizer bias-corrects Conv3d (its own module); 3.0's does not, so its bias and the "
        "values after it differ from a 3.0 quantization",
        "compare the accuracy of a 3.0 quantization with this one before mixing their files",
        "pytorch_nndct/nn/modules/conv3d.py (new in v3.5), pytorch_nndct/quantization/torchquantizer.py "
        "(export_quant_config's bias-correction list)"),
)


def release_warnings(target: DpuTarget, traced: TracedModel) -> List[str]:
    """One warning per node of ``traced`` that meets a difference in ``DIFFERENCES``, naming the node
    (its fx name and what the model called), when ``target``'s boards run ``BOARD_RELEASE``; else []."""
    if target.board_release != BOARD_RELEASE:
        return []
    found = []
    for node in traced.nodes:
        for d in DIFFERENCES:
            what = d.meets(node)
            if what:
                found.append("%s boards run Vitis AI %s: node %r (%s) is %s. %s. To do: %s" % (
                    target.name, BOARD_RELEASE, node.name, node.source, what, d.differs, d.todo))
    return found


def check_model(model: Any, example: Any, target: DpuTarget, traced: Any = None) -> List[str]:
    """``release_warnings`` for a float model and its example input (``trace_model``, from the step's
    ``traced`` float trace when given); the model is captured only when the target's boards run
    ``BOARD_RELEASE``. Neither argument is modified. A model torch.fx cannot trace (the real quantizer
    may still take it) gets one warning saying so."""
    if target.board_release != BOARD_RELEASE:
        return []
    try:
        captured = trace_model(model, example, traced)
    except PipelineError as exc:
        return ["%s boards run Vitis AI %s: the model could not be checked for the differences between 3.0 and "
                "3.5 (%s)" % (target.name, BOARD_RELEASE, exc)]
    return release_warnings(target, captured)
