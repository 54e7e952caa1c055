"""PNG plots of the per-layer sensitivity rows (``pipeline.sensitivity.layer_sensitivity``).

matplotlib is optional at run time: it is imported inside the functions, :func:`is_available`
says whether it is installed, and the report keeps its table without it. The figures are built on
``matplotlib.figure.Figure`` with the Agg canvas (no pyplot, no display, no global state), under
matplotlib's default style (a user's matplotlibrc does not change them), and saved without the
"Software" metadata, so equal rows give byte-identical PNG files with one matplotlib version.
Files are written atomically (``pipeline.fileio.write_bytes``).

Layers are listed top to bottom in graph order (the model input first). A layer's label is the
float model's module path or fx node, then the nndct node without its ``nndct_`` prefix in
brackets: ``relu1 [relu_2]``, ``bn1 [conv2d_1]``.
"""
import io
import math
from typing import Any, Dict, List, Optional

from . import fileio
from .errors import BackendUnavailableError

DPI = 100
BAR_COLOR = "#4C72B0"
CLE_COLOR = "#8C6BB1"
CLIP_COLOR = "#C44E52"
RANGE_COLOR = "#DDDDDD"


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
    """``"<float module or node> [<nndct node without 'nndct_'>]"``, e.g. ``"layer1.0.relu [relu_5]"``."""
    float_name = row["float_target"] if row["float_target"].replace(".", "_") == row["float_node"] \
        else row["float_node"]
    short = row["node"][len("nndct_"):] if row["node"].startswith("nndct_") else row["node"]
    return "%s [%s]" % (float_name, short)


def _figure(n_rows: int, width: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, 1.6 + 0.32 * max(n_rows, 1)), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _render(build: Any, rows: List[Dict[str, Any]], path: Optional[str] = None) -> Any:
    """``build(rows)`` under matplotlib's default style; saved to ``path`` when given."""
    _require()
    import matplotlib.style
    with matplotlib.style.context("default"):
        fig = build(rows)
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
    widths, colors, hatches = [], [], []
    for r in rows:
        s = r["sqnr_db"]
        widths.append(top if s == math.inf else (bottom if s == -math.inf else s))
        colors.append(CLE_COLOR if r["cle_rescaled"] else BAR_COLOR)
        hatches.append("//" if math.isinf(s) else "")
    bars = ax.barh(ys, widths, color=colors, height=0.7)
    for bar, hatch, r, y in zip(bars, hatches, rows, ys):
        bar.set_hatch(hatch)
        s = r["sqnr_db"]
        text = ("inf (exact)" if s > 0 else "-inf") if math.isinf(s) else "%.1f" % s
        x = bar.get_width()
        ax.text(x - 0.01 * top if math.isinf(s) else x + 0.01 * top, y, text, va="center",
                ha="right" if math.isinf(s) else "left", fontsize=8, color="white" if math.isinf(s) else "black")
    ax.set_xlim(min(bottom, 0.0), top)
    ax.set_yticks(ys)
    ax.set_yticklabels([layer_label(r) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("SQNR (dB), quantized vs float, higher is better")
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=BAR_COLOR, label="float model scale")]
    if any(r["cle_rescaled"] for r in rows):
        handles.append(Patch(color=CLE_COLOR, label="inside a CLE pair (channel scale undone)"))
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False, fontsize=8)

    cos = [r["cosine"] for r in rows]
    low = min(cos) if cos else 1.0
    span = max(1.0 - low, 1e-6)
    ax_cos.hlines(ys, low - 0.15 * span, cos, color="#BBBBBB", linewidth=1)
    ax_cos.plot(cos, ys, "o", color=BAR_COLOR, markersize=5)
    for c, y in zip(cos, ys):
        ax_cos.text(c - 0.02 * span, y - 0.25, "%.6f" % c, ha="right", va="bottom", fontsize=7)
    ax_cos.set_xlim(low - 0.15 * span, 1.0 + 0.05 * span)
    ax_cos.xaxis.set_major_locator(MaxNLocator(nbins=4))
    ax_cos.ticklabel_format(axis="x", useOffset=False)
    ax_cos.set_xlabel("cosine similarity (1 = same direction)")
    ax_cos.grid(axis="x", alpha=0.3)
    fig.suptitle("Per-layer sensitivity: SQNR and cosine similarity of each quantized output vs float", fontsize=10)
    fig.tight_layout()
    return fig


def activation_range_figure(rows: List[Dict[str, Any]]) -> Any:
    """The activation-range figure of ``rows`` (a ``matplotlib.figure.Figure``, not saved).

    One axes (``fig.axes[0]``), one row per layer: the range the fix_pos represents
    (``range_min .. range_max``, a wide grey bar) behind the float values' range in the quantized
    graph's scale (``graph_min .. graph_max``, a narrow bar, red where the fix_pos clips), fix_pos
    and clipped percentage written on the right.

    Raises:
        BackendUnavailableError: matplotlib is not installed.
    """
    return _render(_ranges, rows)


def _ranges(rows: List[Dict[str, Any]]) -> Any:
    from matplotlib.patches import Patch
    fig = _figure(len(rows), 11.0)
    ax = fig.subplots(1, 1)
    ys = list(range(len(rows)))
    ax.barh(ys, [r["range_max"] - r["range_min"] for r in rows], left=[r["range_min"] for r in rows],
            height=0.8, color=RANGE_COLOR)
    inside = [(max(r["graph_min"], r["range_min"]), min(r["graph_max"], r["range_max"])) for r in rows]
    ax.barh(ys, [max(hi - lo, 0.0) for lo, hi in inside], left=[lo for lo, _ in inside], height=0.35,
            color=BAR_COLOR)
    for r, y in zip(rows, ys):
        if r["graph_max"] > r["range_max"]:
            ax.barh([y], [r["graph_max"] - r["range_max"]], left=[r["range_max"]], height=0.35, color=CLIP_COLOR)
        if r["graph_min"] < r["range_min"]:
            ax.barh([y], [r["range_min"] - r["graph_min"]], left=[r["graph_min"]], height=0.35, color=CLIP_COLOR)
    ax.axvline(0.0, color="black", linewidth=0.6)
    ax.set_yticks(ys)
    ax.set_yticklabels([layer_label(r) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("value (quantized graph's scale)")
    fig.suptitle("Float value range vs the range each fix_pos represents", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    low = min([0.0] + [min(r["range_min"], r["graph_min"]) for r in rows])
    high = max([0.0] + [max(r["range_max"], r["graph_max"]) for r in rows])
    ax.set_xlim(low - 0.03 * (high - low), high + 0.03 * (high - low))
    for r, y in zip(rows, ys):
        clip = r["clipped_fraction"]
        text = "fix_pos %d   clipped %s" % (r["fix_pos"], "0" if clip == 0 else "%.3g%%" % (100 * clip))
        ax.text(1.01, y, text + ("   (CLE scale)" if r["cle_rescaled"] else ""),
                transform=ax.get_yaxis_transform(), va="center", fontsize=8,
                color=CLIP_COLOR if clip > 0 else "black")
    bits = sorted(set(r["bitwidth"] for r in rows))
    codes = "-%d .. %d" % (2 ** (bits[0] - 1), 2 ** (bits[0] - 1) - 1) if len(bits) == 1 else "code range"
    ax.legend(handles=[Patch(color=RANGE_COLOR, label="fix_pos range: %s times 2^-fix_pos" % codes),
                       Patch(color=BAR_COLOR, label="float min .. max"),
                       Patch(color=CLIP_COLOR, label="float values the fix_pos clips")],
              loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


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
