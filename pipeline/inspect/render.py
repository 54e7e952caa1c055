"""Text and DOT renderings of an inspection, modelled on the real Inspector's ``inspect_<target>.txt``
and graph picture (vai_q_pytorch ``pytorch_binding/pytorch_nndct/hardware_v3/inspector.py``; docs/targets.md#inspector):
a header explaining the fields and the NCHW/NHWC hint, the target, a summary of the operators
assigned to the CPU with their hardware constraints, then one block per node.
"""

from typing import TYPE_CHECKING, List

from pipeline.inspect.partition import partition_lines

if TYPE_CHECKING:  # pragma: no cover - imports for annotations only
    from pipeline.inspect.inspector import Inspection

_RULE = "=" * 100

_HEADER = """\
# inspect_{target}.txt: where each operation of the model runs on {target}.
# Written on the CPU by pipeline.inspect from the target's engine parameters (target_factory
# prototxt). The real Inspector (pytorch_nndct.apis.Inspector, Vitis AI image) gives the final answer.
# Field description:
# target info: the DPU target and its engine parameters.
# inspection summary: the operators assigned to the CPU, the changes the quantizer makes or offers.
# node name / input nodes / output nodes / op type / source: the node, its neighbours, what the model called.
# xmodel op: the op the quantized <Model>_int.xmodel holds for the node (the name vai_c_xir reports).
# outputs shape: XIR layout (NHWC for 4-D feature maps); PyTorch's NCHW shape follows.
# assigned device: DPU or CPU.
# hardware constraints: why the operation is not on the DPU.
# node messages: fusions, quantizer changes, inserted permutes, hints on what to change.
# partition: the DPU and CPU subgraphs the compiler forms (its count as vai_c_xir's "DPU subgraph number").
# fix: a rewrite of the float model that puts the node on the DPU ("values change" when it is not exact).
# Hints:
# Due to data layout difference between PyTorch ('NCHW') and XIR ('NHWC'), the quantizer inserts a
# permute before a reshape/flatten of a 4-D feature map (the node message says so). Such permutes may
# keep the model from running entirely on the DPU. Inserting x.permute(0, 2, 3, 1) before the reshape in
# the float model cancels it; the elements then reach the next layer in another order.
# Explanation of some hardware constraints messages:
#   "Try to assign {{pattern name}} to DPU failed.": the compiler will not run these operations together on the DPU.
#   "{{op type}} can't be assigned to DPU.": XIR can express the operator, but no DPU engine or compiler pattern
#   of the target takes it here.
"""


def _engines(inspection: "Inspection") -> List[str]:
    target = inspection.target
    t = target.engines
    conv = t.conv
    lines = ["{} ({}, batch {})".format(target.name, target.family, t.batch),
             "conv_engine: input/output channel parallel {}/{}, pixel parallel {}, kernel {}, stride "
             "{}, nonlinear {}, weights {} banks x {} wide x {} deep".format(
                 conv.input_channel_parallel, conv.output_channel_parallel, conv.pixel_parallel,
                 conv.kernel_size, conv.stride, ", ".join(conv.nonlinear),
                 conv.weight_bank.bank_num, conv.weight_bank.bank_width, conv.weight_bank.bank_depth)]
    if t.eltwise is not None:
        lines.append("eltwise_engine: {}, nonlinear {}".format(
            ", ".join(t.eltwise.elew_types), ", ".join(t.eltwise.nonlinear)))
    if t.alu is not None:
        lines.append("alu_engine: {}, kernel {}, stride {}, nonlinear {}".format(
            ", ".join(t.alu.alu_types), t.alu.kernel_size, t.alu.stride, ", ".join(t.alu.nonlinear)))
    if t.pool is not None:
        lines.append("pool_engine: {}, max kernel {} stride {}, avg kernel {} stride {}".format(
            ", ".join(t.pool.pool_types), t.pool.max_kernel_size, t.pool.max_stride,
            t.pool.avg_kernel_size, t.pool.avg_stride))
    if t.dwconv is not None:
        lines.append("dwconv_engine: kernel {}, stride {}, nonlinear {}".format(
            t.dwconv.kernel_size, t.dwconv.stride, ", ".join(t.dwconv.nonlinear)))
    return lines


def _table(rows: List[List[str]]) -> List[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * len(row[-1]))
    return lines


def render_text(inspection: "Inspection") -> str:
    """The text report, ending with the summary line."""
    out = [_HEADER.format(target=inspection.target.name), _RULE, "target info:", _RULE]
    out += _engines(inspection) + ["", _RULE, "inspection summary:", _RULE]
    cpu = [n for n in inspection.nodes if n.device == "CPU"]
    if cpu:
        out.append("The operators assigned to the CPU are as follows:")
        out += _table([["node name", "op type", "xmodel op", "hardware constraints"]]
                      + [[n.name, n.op, n.xmodel_op or "-", " ".join(n.reasons)] for n in cpu])
    else:
        out.append("All the operators are assigned to the DPU.")
    changed = [n for n in inspection.nodes if n.changes]
    if changed:
        out += ["", "Changes the quantizer makes or offers:"]
        out += ["  {} ({}): {}".format(n.name, n.op, change) for n in changed for change in n.changes]
    out += ["", _RULE] + partition_lines(inspection)
    out += [_RULE, "graph name: {}".format(inspection.model_name)]
    for name, shape in inspection.inputs:
        out += [_RULE, "node name: {}".format(name), "op type: input",
                "outputs shape: {}".format(list(shape) if shape else None)]
    for node in inspection.nodes:
        out += [_RULE, "node name: {}".format(node.name),
                "input nodes: {}".format(node.inputs), "output nodes: {}".format(node.outputs),
                "op type: {}".format(node.op), "source: {}".format(node.source)]
        if node.xmodel_op:
            out.append("xmodel op: {}".format(node.xmodel_op))
        if node.shape is not None:
            out.append("outputs shape: {} (PyTorch {})".format(list(node.xir_shape), list(node.shape)))
        if node.attrs:
            out.append("op attributes:")
            out += ["  {}: {}".format(key, value) for key, value in node.attrs.items()]
        out.append("assigned device: {}".format(node.device))
        if node.reasons:
            out.append("hardware constraints: {}".format(" ".join(node.reasons)))
        if node.notes:
            out.append("node messages:")
            out += ["  " + note for note in node.notes]
        if node.fixes:
            out.append("fixes:")
            out += ["  " + fix.line() for fix in node.fixes]
    out += [_RULE, inspection.summary_line(), ""]
    return "\n".join(out)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(inspection: "Inspection") -> str:
    """Graphviz DOT source: DPU nodes blue, CPU nodes red, graph inputs and output grey; a CPU
    node's tooltip holds its hardware constraints."""
    out = ["digraph {} {{".format(_quote(inspection.model_name)),
           '  label={}; labelloc="t";'.format(_quote("{} on {}: {}".format(
               inspection.model_name, inspection.target.name, inspection.summary_line()))),
           '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];']
    for name, shape in inspection.inputs:
        out.append("  {} [label={}, fillcolor=lightgrey];".format(
            _quote(name), _quote("{}\ninput\n{}".format(name, list(shape) if shape else ""))))
    colours = {"DPU": ("#cfe2ff", "blue"), "CPU": ("#f8d7da", "red")}
    for node in inspection.nodes:
        fill, line = colours[node.device]
        label = "{}\n{}\n{}\n{}".format(node.name, node.op, list(node.shape) if node.shape else "",
                                        node.device)
        tooltip = " ".join(node.reasons) or " ".join(node.notes) or node.device
        out.append("  {} [label={}, fillcolor={}, color={}, tooltip={}];".format(
            _quote(node.name), _quote(label), _quote(fill), line, _quote(tooltip)))
    out.append('  "output" [label="output", shape=ellipse, fillcolor=lightgrey];')
    for node in inspection.nodes:
        for source in node.inputs:
            out.append("  {} -> {};".format(_quote(source), _quote(node.name)))
    for name in inspection.outputs:
        out.append("  {} -> \"output\";".format(_quote(name)))
    out.append("}")
    return "\n".join(out) + "\n"
