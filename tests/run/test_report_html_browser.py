"""report.html in a real browser: headless Chromium loads the page of a real run (QAT and the inspection's
partition) from a file:// URL; its DOM holds the run's numbers and node names, its tables sort when a
header is clicked (the page's own #selftest clicks every header twice; the order is checked here too),
its screenshot is not blank, and the console stays silent. The hostile names of the unit tests'
page (tests/support/report_html_case.py) run no script in the browser.

Chromium comes from the OS packages: the ``chromium`` fixture installs it with apt-get where it is
missing and the tests run as root, and skips with the reason otherwise."""
import html as htmllib
import json
import os
import re
import shutil
import subprocess

import pytest

from tests.support import REPO, python
from tests.support.report_html_case import HOSTILE, make_case, png_colours

pytestmark = pytest.mark.slow

CONFIG = os.path.join(REPO, "configs", "digits_sim_zcu102_qat.yaml")
STEPS = "train,inspect,calib,qat,test,export,compile,deploy"


def _which():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def chromium():
    """The chromium binary; installed from the OS packages (apt-get, as root) where missing."""
    found = _which()
    if found:
        return found
    if shutil.which("apt-get") is None:
        pytest.skip("no chromium and no apt-get to install it: install Chromium (the package 'chromium') to run "
                    "the browser tests of report.html")
    if os.geteuid() != 0:
        pytest.skip("no chromium, and installing it needs root: run `apt-get install -y chromium` as root")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log = []
    for argv in (["apt-get", "install", "-y", "chromium"], ["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
        log.append(proc.stdout.decode("utf-8", "replace")[-1500:])
        if argv[1] == "install" and proc.returncode == 0 and _which():
            return _which()
    pytest.skip("apt-get could not install chromium: %s" % log[-1])


def browse(chromium, tmp_path, url, *flags):
    """Headless Chromium on ``url``: (stdout, the console's lines: any line the page logs, errors included)."""
    profile = tmp_path / ("profile-%d" % len(list(tmp_path.glob("profile-*"))))
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--user-data-dir=%s" % profile, "--enable-logging=stderr", "--v=0"] + list(flags) + [url]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")[-3000:]
    err = proc.stderr.decode("utf-8", "replace")
    return (proc.stdout.decode("utf-8", "replace"),
            [line for line in err.splitlines() if ":CONSOLE" in line or "Uncaught" in line])


def url_of(path, fragment=""):
    return "file://" + os.path.abspath(path) + fragment


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("report_html") / "run")
    proc = python("scripts/run_pipeline.py", "--config", CONFIG, "--set", "run.work_dir=" + work, "--steps", STEPS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(work, "report.json")) as f:
        return work, json.load(f)


def _tables(dom):
    """Per table of the DOM: (header texts, rows of cell texts)."""
    out = []
    for t in re.findall(r"<table.*?</table>", dom, re.S):
        def cells(row, tag):
            return [htmllib.unescape(re.sub(r"<[^>]*>", "", c)).strip()
                    for c in re.findall(r"<%s[^>]*>(.*?)</%s>" % (tag, tag), row, re.S)]
        rows = re.findall(r"<tr[^>]*>(.*?)</tr>", t, re.S)
        out.append((cells(rows[0], "th"), [cells(r, "td") for r in rows[1:]]))
    return out


def test_report_html_real_run_in_chromium(chromium, real_run, tmp_path):
    work, report = real_run
    page = os.path.join(work, "report.html")
    with open(page) as f:
        source = f.read()
    assert work not in source and not [n for n in os.listdir(work) if n.startswith(".") and "report" in n]
    dom, console = browse(chromium, tmp_path, url_of(page), "--dump-dom")
    assert console == []
    assert '<pre id="script-errors"></pre>' in dom
    text = htmllib.unescape(re.sub(r"<[^>]*>", " ", dom))
    qat = report["qat"]["accuracy"] if isinstance(report.get("qat"), dict) and "accuracy" in report["qat"] else {}
    for value in [report["float_accuracy"], report["quant_accuracy"]] + [v for v in qat.values() if isinstance(v, float)]:
        assert "%.4f" % value in text, value
    assert "QAT deployed" in text and "Quantization-aware training" in text and "Fix positions" in text
    for row in report["sensitivity"]:
        assert row["node"] in text and "%.2f" % row["sqnr_db"] in text
    nodes = report["steps"]["inspect"]["graph"]["nodes"]
    assert nodes and all('data-name="%s"' % n["name"] in dom for n in nodes)  # drawn in the inline SVG
    assert re.search(r"<svg[^>]*>.*<g class=\"node\"", dom, re.S)
    for artifact in report["artifacts"]:
        assert artifact["sha256"] in text
    assert "Compile plan" in text and "vai_c_xir" in text
    assert dom.count("data:image/png;base64,") == 3  # sensitivity, activation ranges, the QAT loss


def test_report_html_tables_sort_when_a_header_is_clicked(chromium, real_run, tmp_path):
    work, report = real_run
    dom, console = browse(chromium, tmp_path, url_of(os.path.join(work, "report.html"), "#selftest"), "--dump-dom")
    assert console == []
    verdict = re.search(r'<pre id="selftest-result">(.*?)</pre>', dom, re.S).group(1)
    assert verdict.startswith("selftest ok: ") and " 0 tables" not in verdict, verdict
    # the self-test clicks each header twice, the last header last: each table is left sorted by its last column,
    # descending; checked here without the page's script
    tables = _tables(dom)
    [(_, sens)] = [t for t in tables if t[0][:2] == ["#", "quantized node"]]
    clipped = [0.0 if c == "0" else float(c.rstrip("%")) for c in (r[-1] for r in sens)]
    assert clipped == sorted(clipped, reverse=True) and len(sens) == len(report["sensitivity"])
    [(_, arts)] = [t for t in tables if t[0] == ["file", "bytes", "sha256"]]
    assert [r[2] for r in arts] == sorted((a["sha256"] for a in report["artifacts"]), reverse=True)


def test_report_html_screenshot_is_not_blank(chromium, real_run, tmp_path):
    work, _ = real_run
    shot = tmp_path / "page.png"
    _, console = browse(chromium, tmp_path, url_of(os.path.join(work, "report.html")), "--screenshot=%s" % shot,
                        "--window-size=1280,1600", "--hide-scrollbars")
    assert console == [] and shot.stat().st_size > 1000
    try:
        from PIL import Image
        with Image.open(str(shot)) as image:
            colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
            assert colours is None or len(colours) > 1
    except ImportError:
        assert png_colours(shot.read_bytes()) > 1


def test_report_html_hostile_names_run_no_script_in_chromium(chromium, tmp_path):
    make_case_dir = tmp_path / "case"
    html, _, _ = make_case(str(make_case_dir / "run"))
    page = make_case_dir / "report.html"
    page.write_text(html)
    dom, console = browse(chromium, tmp_path, url_of(str(page), "#selftest"), "--dump-dom")
    assert console == []  # an <img src=x> that got through would log its failed load
    assert re.search(r"<title>(.*?)</title>", dom, re.S).group(1).startswith("Run report: digits&lt;script&gt;")
    assert not re.search(r"<img[^>]*src=\"x\"", dom) and dom.count("<script") == 1
    assert htmllib.escape(HOSTILE, quote=False) in dom or HOSTILE.replace("<", "&lt;").replace(">", "&gt;") in dom
    assert "selftest ok: " in dom


def test_report_html_browser_check_sees_console_errors(chromium, tmp_path):
    """The console check above is not vacuous: a page that throws is caught."""
    page = tmp_path / "throws.html"
    page.write_text("<!DOCTYPE html><html><body><script>throw new Error('broken page')</script></body></html>")
    _, console = browse(chromium, tmp_path, url_of(str(page)), "--dump-dom")
    assert any("Uncaught" in line and "broken page" in line for line in console), console
