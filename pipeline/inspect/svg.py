"""The inspection's graph as SVG, drawn here: ``inspect_<target>.svg`` needs no graphviz.

The real Inspector draws its picture with graphviz (docs/targets.md#inspector); a user of the CPU
inspection expects the ``.svg`` without installing a binary, so this module lays the graph out itself
(the ``.gv`` beside it is the same graph for graphviz users). The drawing says what the DOT says:
one box per graph input, node and the output; DPU nodes blue, CPU nodes red, inputs and the output
grey; each box reads name, op type, PyTorch shape and device; a box's ``<title>`` (the browser's
tooltip) holds the CPU node's hardware constraints, else its notes.

Layout, a layered drawing kept simple: a node's layer is the longest path to it from a graph input
(so every edge points down); within a layer nodes are ordered by the mean position of their inputs in
the layers above, ties by topological order; layers are centred on the widest. Edges are cubic curves
from the bottom of a box to the top of the next, with an arrow head. Text widths are estimated for a
monospace font (0.6 em per character). The same inspection gives the same bytes.
"""
from typing import TYPE_CHECKING, Dict, List, Tuple

if TYPE_CHECKING:  # pragma: no cover - imports for annotations only
    from pipeline.inspect.inspector import Inspection

FONT = 10  # px
CHAR = 0.6 * FONT  # px per character of the monospace font
LINE = 13  # px per text line
PAD = 6  # px inside a box
GAP_X, GAP_Y = 24, 42  # px between boxes of a layer, between layers
MARGIN = 20
COLOURS = {"DPU": ("#cfe2ff", "#0d47a1"), "CPU": ("#f8d7da", "#b71c1c"), "io": ("#e0e0e0", "#616161")}
OUTPUT = "output"


def _escape(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("'", "&#39;"))


def _boxes(inspection: "Inspection") -> List[Tuple[str, List[str], str, str, List[str]]]:
    """(name, lines, colour key, tooltip, inputs) per box, in topological order."""
    boxes = [(name, [name, "input", str(list(shape)) if shape else ""], "io", "graph input", [])
             for name, shape in inspection.inputs]
    for node in inspection.nodes:
        tooltip = " ".join(node.reasons) or " ".join(node.notes) or node.device
        boxes.append((node.name, [node.name, node.op, str(list(node.shape)) if node.shape else "", node.device],
                      node.device, tooltip, list(node.inputs)))
    boxes.append((OUTPUT, [OUTPUT], "io", "the model's outputs", list(inspection.outputs)))
    return boxes


def _layers(boxes: List[Tuple[str, List[str], str, str, List[str]]]) -> List[List[int]]:
    """Box indices per layer, each layer ordered (see the module docstring)."""
    index = {b[0]: i for i, b in enumerate(boxes)}
    depth = []  # type: List[int]
    for name, _, _, _, inputs in boxes:
        parents = [depth[index[p]] for p in inputs if p in index and index[p] < len(depth)]
        depth.append(1 + max(parents) if parents else 0)
    layers = [[] for _ in range(max(depth) + 1)]  # type: List[List[int]]
    for i, d in enumerate(depth):
        layers[d].append(i)
    position = {}  # type: Dict[int, float]
    for layer in layers:
        def key(i: int) -> Tuple[float, int]:
            parents = [position[index[p]] for p in boxes[i][4] if p in index and index[p] in position]
            return (sum(parents) / len(parents) if parents else -1.0, i)
        layer.sort(key=key)
        for rank, i in enumerate(layer):
            position[i] = float(rank) - (len(layer) - 1) / 2.0
    return layers


def _edges(boxes: List[Tuple[str, List[str], str, str, List[str]]], layers: List[List[int]],
           where: Dict[int, Tuple[float, float, float, float]]) -> List[Tuple[str, str, str]]:
    """(from, to, path data) per edge. An edge to the next layer is one curve; one that skips layers
    goes round the right of the boxes it passes, in a lane of its own, so it never hides behind them."""
    index = {b[0]: i for i, b in enumerate(boxes)}
    layer_of = {i: k for k, layer in enumerate(layers) for i in layer}
    lanes = []  # type: List[List[Tuple[float, float]]]  # per lane: the vertical spans it holds
    out = []  # type: List[Tuple[str, str, str]]
    for i, box in enumerate(boxes):
        for parent in box[4]:
            if parent not in index:
                continue
            (px, py, pw, ph), (cx, cy, cw, _) = where[index[parent]], where[i]
            x0, y0, x1, y1 = px + pw / 2.0, py + ph, cx + cw / 2.0, cy
            skipped = [j for k in range(layer_of[index[parent]] + 1, layer_of[i]) for j in layers[k]]
            if not skipped:
                bend = max(12.0, (y1 - y0) / 2.0)
                d = "M {:.1f} {:.1f} C {:.1f} {:.1f} {:.1f} {:.1f} {:.1f} {:.1f}".format(
                    x0, y0, x0, y0 + bend, x1, y1 - bend, x1, y1)
            else:
                lane = next((n for n, spans in enumerate(lanes) if all(b <= y0 or a >= y1 for a, b in spans)),
                            len(lanes))
                if lane == len(lanes):
                    lanes.append([])
                lanes[lane].append((y0, y1))
                side = max(where[j][0] + where[j][2] for j in skipped) + GAP_X / 2.0 + 8 * lane
                b = GAP_Y / 2.0
                d = ("M {:.1f} {:.1f} C {:.1f} {:.1f} {:.1f} {:.1f} {:.1f} {:.1f} L {:.1f} {:.1f} "
                     "C {:.1f} {:.1f} {:.1f} {:.1f} {:.1f} {:.1f}").format(
                         x0, y0, x0, y0 + b, side, y0, side, y0 + b, side, y1 - b, side, y1, x1, y1 - b, x1, y1)
            out.append((_escape(parent), _escape(box[0]), d))
    return out


def render_svg(inspection: "Inspection") -> str:
    """The SVG document (UTF-8 text) of ``inspection``'s graph."""
    boxes = _boxes(inspection)
    layers = _layers(boxes)
    size = [(max(len(line) for line in b[1]) * CHAR + 2 * PAD, len(b[1]) * LINE + 2 * PAD) for b in boxes]
    widths = [sum(size[i][0] for i in layer) + GAP_X * (len(layer) - 1) for layer in layers]
    width = max(widths) + 2 * MARGIN + 4 * GAP_X  # room on the right for the edges that skip layers
    title = "{} on {}: {}".format(inspection.model_name, inspection.target.name, inspection.summary_line())
    width = max(width, len(title) * CHAR * 1.2 + 2 * MARGIN)
    where = {}  # type: Dict[int, Tuple[float, float, float, float]]  # x, y, w, h
    y = MARGIN + 2 * LINE
    for layer, row_width in zip(layers, widths):
        x = (width - row_width) / 2.0
        height = max(size[i][1] for i in layer)
        for i in layer:
            where[i] = (x, y + (height - size[i][1]) / 2.0, size[i][0], size[i][1])
            x += size[i][0] + GAP_X
        y += height + GAP_Y
    height = y - GAP_Y + MARGIN
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" viewBox="0 0 {:.0f} {:.0f}" '
           'font-family="monospace" font-size="{}">'.format(width, height, width, height, FONT),
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#424242"/></marker></defs>',
           '<title>{}</title>'.format(_escape(title)),
           '<text x="{:.1f}" y="{:.1f}" text-anchor="middle" font-size="{}">{}</text>'.format(
               width / 2.0, MARGIN + LINE, FONT + 2, _escape(title)),
           '<g class="edges" fill="none" stroke="#424242" stroke-width="1">']
    for edge in _edges(boxes, layers, where):
        out.append('<path class="edge" data-from="{}" data-to="{}" marker-end="url(#arrow)" d="{}"/>'.format(*edge))
    out.append('</g>')
    for i, (name, lines, colour, tooltip, _) in enumerate(boxes):
        x, top, w, h = where[i]
        fill, line = COLOURS[colour]
        out.append('<g class="node" data-name="{}" data-device="{}"><title>{}</title>'.format(
            _escape(name), colour if colour != "io" else "", _escape(tooltip)))
        out.append('<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" rx="6" fill="{}" stroke="{}"/>'.format(
            x, top, w, h, fill, line))
        for k, text in enumerate(lines):
            out.append('<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>'.format(
                x + w / 2.0, top + PAD + (k + 1) * LINE - 3, _escape(text)))
        out.append('</g>')
    out.append('</svg>')
    return "\n".join(out) + "\n"
