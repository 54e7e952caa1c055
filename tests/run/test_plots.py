"""pipeline.steps.plots: what the sensitivity figures draw, the PNG files, and running without matplotlib."""
import math
import os
import struct
import sys

import pytest

from pipeline.steps import plots
from pipeline.errors import BackendUnavailableError
from pipeline.quantizers.sensitivity_rows import ROW_KEYS, LayerSensitivity

needs_matplotlib = pytest.mark.skipif(not plots.is_available(), reason="matplotlib is not installed")


def _row(node, float_node, float_target, sqnr, cosine, fix_pos, lo, hi, cle=False, clipped=0.0):
    row = {"node": node, "float_node": float_node, "float_target": float_target, "op": node.rsplit("_", 1)[0],
           "fix_pos": fix_pos, "bitwidth": 8, "shape": [4, 2, 2], "elements": 160, "sqnr_db": sqnr,
           "cosine": cosine, "float_min": lo, "float_max": hi, "graph_min": lo, "graph_max": hi,
           "range_min": -128 * 2.0 ** -fix_pos, "range_max": 127 * 2.0 ** -fix_pos, "clipped_fraction": clipped,
           "cle_rescaled": cle, "cle_scale": [0.5, 2.0] if cle else None, "notes": []}
    assert list(row) == list(ROW_KEYS)
    return row


ROWS = [
    _row("nndct_input_0", "x", "input", math.inf, 1.0, 5, -2.0, 2.0),
    _row("nndct_relu_2", "layer1_0_relu", "layer1.0.relu", 31.5, 0.99971, 5, 0.0, 4.6, cle=True, clipped=1e-4),
    _row("nndct_elemwise_add_7", "add_1", "add", 24.25, 0.9962, 4, -9.0, 6.0, clipped=0.02),
    _row("nndct_dense_9", "fc", "fc", 12.0, 0.97, 6, -1.0, 1.5),
]


def test_layer_labels():
    assert [plots.layer_label(r) for r in ROWS] == [
        "x [input_0]", "layer1.0.relu [relu_2]", "add_1 [elemwise_add_7]", "fc [dense_9]"]


@needs_matplotlib
def test_sensitivity_figure_draws_one_bar_per_layer():
    fig = plots.sensitivity_figure(ROWS)
    ax, ax_cos = fig.axes
    bars = ax.patches
    assert len(bars) == len(ROWS)
    assert [t.get_text() for t in ax.get_yticklabels()] == [plots.layer_label(r) for r in ROWS]
    # finite SQNRs are the bar lengths; the exact layer's bar is hatched and reaches the panel edge
    assert [b.get_width() for b in bars[1:]] == [31.5, 24.25, 12.0]
    assert bars[0].get_width() == ax.get_xlim()[1] and bars[0].get_hatch() == "//"
    assert ax.get_xlim()[1] > 31.5
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["inf (exact)", "31.5", "24.2", "12.0"]
    # graph order top to bottom: the first row is drawn highest
    assert ax.yaxis_inverted() and [b.get_y() + b.get_height() / 2 for b in bars] == [0, 1, 2, 3]
    # the CLE row has its own colour, named in the legend
    colours = [b.get_facecolor() for b in bars]
    assert colours[1] != colours[0] and colours[0] == colours[2] == colours[3]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "float model scale", "inside a CLE pair (channel scale undone)"]
    # cosine panel: one dot per layer at its value, the axis zoomed onto the values
    assert list(ax_cos.lines[0].get_xdata()) == [r["cosine"] for r in ROWS]
    low, high = ax_cos.get_xlim()
    assert 0.9 < low < 0.97 and 1.0 < high < 1.01


@needs_matplotlib
def test_activation_range_figure_draws_ranges_and_clipping():
    fig = plots.activation_range_figure(ROWS)
    (ax,) = fig.axes
    patches = ax.patches
    n = len(ROWS)
    ranges, floats, clips = patches[:n], patches[n:2 * n], patches[2 * n:]
    # in code units (value * 2^fix_pos): the code range is -128 .. 127 for every 8-bit row
    assert [(b.get_x(), b.get_x() + b.get_width()) for b in ranges] == [(-128, 127)] * n
    expected = [(-64.0, 64.0), (0.0, 127.0), (-128.0, 96.0), (-64.0, 96.0)]  # float range inside the codes
    assert [(b.get_x(), b.get_x() + b.get_width()) for b in floats] == expected
    # beyond the code range: relu_2 above (4.6 * 32 = 147.2), add below (-9 * 16 = -144)
    assert [(b.get_x(), b.get_x() + b.get_width()) for b in clips] == [(127, pytest.approx(147.2)), (-144, -128)]
    assert [t.get_text() for t in ax.get_yticklabels()] == [plots.layer_label(r) for r in ROWS]
    assert [t.get_text() for t in ax.texts] == [
        "fix_pos 5   float -2 .. 2   clipped 0",
        "fix_pos 5   float 0 .. 4.6 (CLE scale)   clipped 0.01%",
        "fix_pos 4   float -9 .. 6   clipped 2%",
        "fix_pos 6   float -1 .. 1.5   clipped 0"]
    low, high = ax.get_xlim()
    assert low < -144 and 147.2 < high < 200


@needs_matplotlib
def test_rows_from_json_draw_the_same(tmp_path):
    import json
    loaded = json.loads(json.dumps([LayerSensitivity.from_json(r).to_json() for r in ROWS], allow_nan=False))
    assert loaded[0]["sqnr_db"] == "inf"
    for plot in (plots.plot_sensitivity, plots.plot_activation_ranges):
        plot(ROWS, str(tmp_path / "a.png"))
        plot(loaded, str(tmp_path / "b.png"))
        assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


@needs_matplotlib
def test_activation_range_axis_is_capped():
    wild = [dict(ROWS[3], graph_min=-1000.0, graph_max=1000.0, float_min=-1000.0, float_max=1000.0)]
    (ax,) = plots.activation_range_figure(ROWS[:1] + wild).axes
    low, high = ax.get_xlim()
    limit = plots.CODE_AXIS_LIMIT * 128
    assert -1.1 * limit < low < -limit and limit < high < 1.1 * limit  # not 64000 codes wide
    assert ax.texts[1].get_text() == "fix_pos 6   float -1e+03 .. 1e+03   clipped 0"


def _png_header(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@needs_matplotlib
def test_png_files_are_deterministic_and_complete(tmp_path):
    for plot in (plots.plot_sensitivity, plots.plot_activation_ranges):
        a, b = str(tmp_path / "a.png"), str(tmp_path / "b.png")
        assert plot(ROWS, a) == a
        plot(ROWS, b)
        with open(a, "rb") as f:
            data = f.read()
        with open(b, "rb") as f:
            assert f.read() == data  # same rows, same bytes
        width, height = _png_header(data)
        assert 800 <= width <= 1600 and 150 <= height <= 100 + 60 * len(ROWS)  # readable, grows with the rows
        assert data.endswith(b"IEND\xaeB`\x82") and b"Software" not in data
        assert 10000 < len(data) < 500000
        assert sorted(os.listdir(str(tmp_path))) == ["a.png", "b.png"]  # no temporaries left


def test_without_matplotlib(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)  # `import matplotlib...` now raises ImportError
    assert plots.is_available() is False
    path = str(tmp_path / "s.png")
    with pytest.raises(BackendUnavailableError, match="pip install matplotlib"):
        plots.plot_sensitivity(ROWS, path)
    with pytest.raises(BackendUnavailableError, match="matplotlib"):
        plots.activation_range_figure(ROWS)
    assert os.listdir(str(tmp_path)) == []
