"""PNG plots of the per-layer sensitivity rows (``pipeline.quantizers.sensitivity_rows.LayerSensitivity``,
as ``pipeline.sensitivity.layer_sensitivity`` gives them), drawn by the test step, and the qat step's loss curve.

matplotlib is optional at run time: it is imported inside the functions, :func:`is_available`
says whether it is installed, and the report keeps its table without it. The figures are built on
``matplotlib.figure.Figure`` with the Agg canvas (no pyplot, no display, no global state), under
matplotlib's default style (a user's matplotlibrc does not change them), and saved without the
"Software" metadata, so equal rows give byte-identical PNG files with one matplotlib version.
Files are written atomically (``pipeline.fileio.write_bytes``).

The rows may come straight from ``layer_sensitivity`` or from JSON (``LayerSensitivity.to_json``).
Layers are listed top to bottom in graph order (the model input first). A layer's label is the
float model's module path or fx node, then the nndct node without its ``nndct_`` prefix in
brackets: ``relu1 [relu_2]``, ``bn1 [conv2d_1]``.
"""
import io
import math
from typing import Any, Dict, List, Optional

from .. import fileio
from ..errors import BackendUnavailableError

DPI = 100
BAR_COLOR = "#4C72B0"
CLE_COLOR = "#8C6BB1"
CLIP_COLOR = "#C44E52"
RANGE_COLOR = "#DDDDDD"
# The activation-range axis spans at most this many times the code range on each side.
CODE_AXIS_LIMIT = 4


def is_available() -> bool:
    """True when matplotlib can be imported (the plots need it; the tables do not)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _require() -> None:
    if not is_available():
        raise BackendUnavailableError("the sensitivity plots need matplotlib, which is not installed; "
                                      "`pip install matplotlib` (the report's tables do not need it)")


def layer_label(row: Dict[str, Any]) -> str:
    """``"<float module or node> [<nndct node without 'nndct_'>]"``, e.g. ``"layer1.0.relu [relu_5]"``
    (``LayerSensitivity.float_name``)."""
    from ..quantizers.sensitivity_rows import LayerSensitivity
    row = LayerSensitivity.of(row)
    short = row["node"][len("nndct_"):] if row["node"].startswith("nndct_") else row["node"]
    return "%s [%s]" % (row.float_name, short)


def _figure(n_rows: int, width: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, 1.6 + 0.32 * max(n_rows, 1)), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _finish(fig: Any, title: str) -> None:
    """Title 0.1 inch below the top edge (a fixed distance: a fraction of the height would drift on
    tall figures and run into the legend above the axes), then tight margins around everything."""
    height = fig.get_figheight()
    fig.suptitle(title, fontsize=10, y=1.0 - 0.1 / height, va="top")
    fig.tight_layout()


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _render(build: Any, rows: List[Dict[str, Any]], path: Optional[str] = None) -> Any:
    """``build(rows)`` under matplotlib's default style; saved to ``path`` when given."""
    _require()
    import matplotlib.style

    from ..quantizers.sensitivity_rows import LayerSensitivity
    with matplotlib.style.context("default"):
        fig = build([LayerSensitivity.of(r) for r in rows])
        if path is not None:
            fileio.write_bytes(path, _png(fig))
    return fig


def sensitivity_figure(rows: List[Dict[str, Any]]) -> Any:
    """The SQNR / cosine figure of ``rows`` (a ``matplotlib.figure.Figure``, not saved).

    Left panel (``fig.axes[0]``): one horizontal bar per row, SQNR in dB, value at the bar's end;
    an exact point (``inf``) is a hatched bar to the panel's edge labelled ``inf (exact)``; rows
    rescaled by CLE are drawn in another colour (legend). Right panel (``fig.axes[1]``): the cosine
    similarity per row as a dot on a zoomed axis, value beside it.

    Raises:
        BackendUnavailableError: matplotlib is not installed.
    """
    return _render(_sensitivity, rows)


def _sensitivity(rows: List[Dict[str, Any]]) -> Any:
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator
    fig = _figure(len(rows), 11.0)
    ax, ax_cos = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3, 2]})
    ys = list(range(len(rows)))
    finite = [r["sqnr_db"] for r in rows if math.isfinite(r["sqnr_db"])]
    top = max([0.0] + finite) * 1.18 + 5.0
    bottom = min([0.0] + finite)
    # +inf (exact): a hatched bar to the panel's edge; -inf (float all zero, quantized not): no bar
    widths = [top if r["sqnr_db"] == math.inf else (0.0 if r["sqnr_db"] == -math.inf else r["sqnr_db"])
              for r in rows]
    bars = ax.barh(ys, widths, height=0.7, color=[CLE_COLOR if r["cle_rescaled"] else BAR_COLOR for r in rows])
    for bar, r, y in zip(bars, rows, ys):
        s = r["sqnr_db"]
        if s == math.inf:
            bar.set_hatch("//")
            bar.set_edgecolor("white")  # the hatch takes the edge colour
            ax.text(top * 0.99, y, "inf (exact)", va="center", ha="right", fontsize=8,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0})
        else:
            ax.text(max(bar.get_width(), 0.0) + 0.01 * top, y, "-inf" if s == -math.inf else "%.1f" % s,
                    va="center", ha="left", fontsize=8)
    ax.set_xlim(bottom - 0.03 * top if bottom < 0 else 0.0, top)
    ax.set_yticks(ys)
    ax.set_yticklabels([layer_label(r) for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # graph order from the top
    ax.set_xlabel("SQNR (dB), quantized vs float, higher is better")
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=BAR_COLOR, label="float model scale")]
    if any(r["cle_rescaled"] for r in rows):
        handles.append(Patch(color=CLE_COLOR, label="inside a CLE pair (channel scale undone)"))
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False, fontsize=8)

    cos = [r["cosine"] for r in rows]
    low = min(cos) if cos else 1.0
    span = max(1.0 - low, 1e-6)
    ax_cos.hlines(ys, low - 0.4 * span, cos, color="#BBBBBB", linewidth=1)
    ax_cos.plot(cos, ys, "o", color=BAR_COLOR, markersize=5)
    for c, y in zip(cos, ys):
        ax_cos.text(c - 0.03 * span, y, "%.6f" % c, ha="right", va="center", fontsize=7,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    ax_cos.set_xlim(low - 0.4 * span, 1.0 + 0.05 * span)
    ax_cos.xaxis.set_major_locator(MaxNLocator(nbins=4))
    ax_cos.ticklabel_format(axis="x", useOffset=False)
    ax_cos.set_xlabel("cosine similarity (1 = same direction)")
    ax_cos.grid(axis="x", alpha=0.3)
    _finish(fig, "Per-layer sensitivity: SQNR and cosine similarity of each quantized output vs float")
    return fig


def activation_range_figure(rows: List[Dict[str, Any]]) -> Any:
    """The activation-range figure of ``rows`` (a ``matplotlib.figure.Figure``, not saved).

    One axes (``fig.axes[0]``), one row per layer, in **code units** (a value times ``2**fix_pos``,
    i.e. in LSBs of that layer's fix_pos), so layers of any scale are equally readable: the code
    range ``-2**(b-1) .. 2**(b-1) - 1`` (a wide grey bar, -128 .. 127 for 8 bits) behind the float
    values' range in the quantized graph's scale (``graph_min .. graph_max`` times ``2**fix_pos``, a
    narrow bar, red beyond the code range, where the fix_pos clips). The axis spans the code range
    plus what the float ranges need, at most ``CODE_AXIS_LIMIT`` times the code range (longer bars
    are cut at the edge; the text gives the real range). On the right of each row: fix_pos, the
    float range in real units and the clipped percentage.

    Raises:
        BackendUnavailableError: matplotlib is not installed.
    """
    return _render(_ranges, rows)


def _codes(row: Dict[str, Any]) -> Any:
    """(float min, float max, code min, code max) of a row in code units."""
    scale = 2.0 ** row["fix_pos"]
    half = 2 ** (row["bitwidth"] - 1)
    return row["graph_min"] * scale, row["graph_max"] * scale, -half, half - 1


def _ranges(rows: List[Dict[str, Any]]) -> Any:
    from matplotlib.patches import Patch
    from matplotlib.ticker import MultipleLocator
    fig = _figure(len(rows), 12.0)
    ax = fig.subplots(1, 1)
    ys = list(range(len(rows)))
    codes = [_codes(r) for r in rows]
    ax.barh(ys, [hi - lo for _, _, lo, hi in codes], left=[lo for _, _, lo, _ in codes], height=0.8,
            color=RANGE_COLOR)
    inside = [(max(fmin, lo), min(fmax, hi)) for fmin, fmax, lo, hi in codes]
    ax.barh(ys, [max(b - a, 0.0) for a, b in inside], left=[a for a, _ in inside], height=0.35, color=BAR_COLOR)
    for (fmin, fmax, lo, hi), y in zip(codes, ys):
        if fmax > hi:
            ax.barh([y], [fmax - hi], left=[hi], height=0.35, color=CLIP_COLOR)
        if fmin < lo:
            ax.barh([y], [lo - fmin], left=[fmin], height=0.35, color=CLIP_COLOR)
    widest = max([128] + [-lo for _, _, lo, _ in codes])
    low = max(min([-widest] + [c[0] for c in codes]), -CODE_AXIS_LIMIT * widest)
    high = min(max([widest] + [c[1] for c in codes]), CODE_AXIS_LIMIT * widest)
    ax.set_xlim(low - 0.04 * (high - low), high + 0.04 * (high - low))
    ax.xaxis.set_major_locator(MultipleLocator(widest // 2 if high - low <= 4 * widest else widest))
    ax.set_ylim(len(rows) - 0.5, -0.5)  # graph order from the top
    ax.axvline(0.0, color="black", linewidth=0.6)
    ax.set_yticks(ys)
    ax.set_yticklabels([layer_label(r) for r in rows], fontsize=8)
    ax.set_xlabel("value x 2^fix_pos (codes: LSBs of each layer's fix_pos)")
    ax.grid(axis="x", alpha=0.3)
    for r, y in zip(rows, ys):
        clip = r["clipped_fraction"]
        text = "fix_pos %d   float %s .. %s%s   clipped %s" % (
            r["fix_pos"], _short(r["graph_min"]), _short(r["graph_max"]), " (CLE scale)" if r["cle_rescaled"] else "",
            "0" if clip == 0 else "%.3g%%" % (100 * clip))
        ax.text(1.01, y, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8,
                color=CLIP_COLOR if clip > 0 else "black")
    bits = sorted(set(r["bitwidth"] for r in rows))
    code_text = "%d .. %d" % (-2 ** (bits[0] - 1), 2 ** (bits[0] - 1) - 1) if len(bits) == 1 else "the codes"
    ax.legend(handles=[Patch(color=RANGE_COLOR, label="code range %s" % code_text),
                       Patch(color=BAR_COLOR, label="float min .. max"),
                       Patch(color=CLIP_COLOR, label="float beyond the code range (clipped)")],
              loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, frameon=False, fontsize=8)
    _finish(fig, "Float value range of each quantized output vs the code range of its fix_pos")
    return fig


def _short(v: float) -> str:
    return "%.3g" % v


def plot_sensitivity(rows: List[Dict[str, Any]], path: str) -> str:
    """Write :func:`sensitivity_figure` of ``rows`` to ``path`` (PNG, atomically); returns ``path``.

    Raises:
        BackendUnavailableError: matplotlib is not installed.
    """
    _render(_sensitivity, rows, path)
    return path


def plot_activation_ranges(rows: List[Dict[str, Any]], path: str) -> str:
    """Write :func:`activation_range_figure` of ``rows`` to ``path`` (PNG, atomically); returns ``path``.

    Raises:
        BackendUnavailableError: matplotlib is not installed.
    """
    _render(_ranges, rows, path)
    return path


def loss_curve_png(points: List[List[float]], epoch_ends: List[int], title: str) -> bytes:
    """The qat step's loss curve as PNG bytes (the step writes them with its other files): loss per
    optimizer step (``points``: ``[[step, loss], ...]``, as ``qat_train.curve`` gives them), a dotted
    line at the last step of each epoch (``epoch_ends``), under matplotlib's default style.

    Raises:
        BackendUnavailableError: matplotlib is not installed.
    """
    _require()
    import matplotlib.style
    with matplotlib.style.context("default"):
        fig = _figure(8, 6.4)
        ax = fig.add_subplot(1, 1, 1)
        ax.plot([p[0] for p in points], [p[1] for p in points], color=BAR_COLOR, linewidth=1.2)
        for step in epoch_ends[:-1]:
            ax.axvline(step, color=RANGE_COLOR, linestyle=":", linewidth=1)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("loss (cross-entropy + threshold norm)")
        ax.grid(True, alpha=0.3)
        _finish(fig, title)
        return _png(fig)
