"""report.html (pipeline/runner/report_html.py, html_parts.py): well-formed, self-contained, the run's
numbers and names, every string escaped. The page in a real browser: test_report_html_browser.py."""
import re
from html.parser import HTMLParser

import pytest

from tests.support.report_html_case import HOSTILE, SHA, make_case, png, png_colours

from pipeline.runner.html_parts import clean_svg, markdown, markdown_file

VOID = {"meta", "img", "br", "hr", "input", "link", "source", "wbr", "col", "area", "base", "embed", "track"}


class Tree(HTMLParser):
    """Checks nesting (every non-void element closed in order) and collects tags, attributes and text."""

    def __init__(self):
        HTMLParser.__init__(self, convert_charrefs=True)
        self.stack, self.errors, self.tags, self.attrs, self.text = [], [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append("</%s> closes %s" % (tag, self.stack[-1:] or "nothing"))
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def parse(html):
    tree = Tree()
    tree.feed(html)
    tree.close()
    return tree


@pytest.fixture
def case(tmp_path):
    html, report, results = make_case(str(tmp_path / "run"))
    return html, parse(html), str(tmp_path / "run")


def test_report_html_is_well_formed(case):
    html, tree, _ = case
    assert html.startswith("<!DOCTYPE html>")
    assert not tree.errors and not tree.stack, (tree.errors, tree.stack)
    assert tree.tags.count("script") == 1 and tree.tags.count("style") == 1 and tree.tags.count("h1") == 1
    ids = [v for _, k, v in tree.attrs if k == "id"]
    assert len(ids) == len(set(ids))
    # the contents' links name sections of the page
    assert {v[1:] for t, k, v in tree.attrs if t == "a" and k == "href"} <= set(ids)


def test_report_html_fetches_nothing(case):
    html, tree, _ = case
    for tag, key, value in tree.attrs:
        if key in ("src", "href", "xlink:href", "action", "poster", "srcset"):
            assert value.startswith(("data:image/png;base64,", "#")), (tag, key, value[:80])
    assert not [t for t in tree.tags if t in ("link", "iframe", "object", "embed", "base", "foreignobject")]
    for url in re.findall(r"url\(\s*([^)]*)\)", html):
        assert url.strip("'\" ").startswith("#"), url
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "@import" not in html
    assert case[2] not in html  # no path of the run folder: the plots are inlined, the paths relative to it


def test_report_html_holds_the_numbers_and_names(case):
    html, tree, _ = case
    text = " ".join(tree.text)
    for expected in ("0.9852", "0.9778", "0.74", "540",                # accuracy: float, quantized, drop, images
                     "31.25", "12.50", "47.75", "nndct_conv2d_3",     # the sensitivity rows
                     "DPU: 2 nodes, CPU: 1 nodes", "sigmoid can't be assigned to DPU.",  # the partition
                     "3 subgraphs: 2 DPU, 1 CPU", "use nn.Hardsigmoid", "dpu_1",      # subgraphs and fixes
                     SHA, "plots/sensitivity.png",                    # the artifacts, full sha256
                     "vai_c_xir -x export/Net_int.xmodel -n digits",  # the compile command
                     "The compiler did not run here.",                # the compile plan
                     "few eval images", "proven here"):
        assert expected in text, expected
    assert html.count('src="data:image/png;base64,') == 2       # both plots inlined
    svg = re.search(r"<svg.*?</svg>", html, re.S).group(0)
    assert 'data-name="conv1"' in svg and 'data-device="CPU"' in svg and "<title>" in svg
    # the sensitivity table sorts: every table is sortable, and numbers carry their value
    assert html.count('<table class="sortable">') >= 4 and 'data-sort="0.0"' in html


def test_report_html_escapes_every_string(case):
    html, tree, _ = case
    assert tree.tags.count("script") == 1 and "<script>document" not in html
    assert not [a for a in tree.attrs if a[1].startswith("on")]
    assert [a for a in tree.attrs if a[0] == "img" and a[1] == "src" and a[2] == "x"] == []
    text = "".join(tree.text)
    # the hostile name reads as text where it occurs: model, warnings, changes, sensitivity, graph, plan, artifacts
    assert text.count(HOSTILE) >= 7, text.count(HOSTILE)


def test_report_html_svg_keeps_only_drawing():
    good = '<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 9 9"><g class="a"><title>t &lt;</title>' \
           '<path d="M 0 0" marker-end="url(#arrow)"/></g></svg>'
    cleaned = clean_svg(good)
    assert cleaned.startswith("<svg") and "t &lt;" in cleaned and 'marker-end="url(#arrow)"' in cleaned
    for bad in ('<svg><script>alert(1)</script></svg>', '<svg onload="alert(1)"></svg>',
                '<svg><a href="https://x.org/"><text>x</text></a></svg>', '<svg><foreignObject></foreignObject></svg>',
                '<svg><rect fill="url(https://x.org/p.svg#a)"/></svg>', '<svg><g><![CDATA[x]]></g></svg>',
                '<svg><g>'):
        assert clean_svg(bad) is None, bad


def test_report_html_inlines_only_the_run_folders_files(tmp_path):
    work = tmp_path / "run"
    work.mkdir()
    (tmp_path / "outside.png").write_bytes(png(2, 2, lambda x, y: (0, 0, 0)))
    (work / "fake.png").write_bytes(b"<svg onload=alert(1)>")
    html = markdown(["![a](../outside.png)", "![b](/etc/passwd)", "![c](fake.png)", "[link](https://x.org)"], str(work))
    assert "data:" not in html and "<img" not in html and "href" not in html
    (work / "plan.md").write_text("# plan\n")
    assert "changed since" in markdown_file("plan.md", "0" * 64, str(work))
    assert "<h3>plan</h3>" in markdown_file("plan.md", None, str(work))


def test_report_html_png_reader_counts_colours():
    assert png_colours(png(3, 3, lambda x, y: (7, 7, 7))) == 1
    assert png_colours(png(3, 3, lambda x, y: (7, 7, 7) if (x, y) != (2, 2) else (8, 7, 7))) == 2
