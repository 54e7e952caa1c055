"""report.html: the run report as one self-contained web page.

The same facts as report.md, from the same typed step results and report.json's content (``report.py``):
the status, the summary lines, the warnings, the quantizer's changes, each step's part (its
``report_html`` blocks, rendered by ``html_parts``: its report.md section unless it gives more, e.g. the
inspection's DPU/CPU graph as inline SVG, the compile plan), the source data, every artifact with its
full sha256, the versions.

The page fetches nothing: the style and the script are inline, the plots are ``data:`` URIs, the
graph is inline SVG; it holds no link but to its own sections. Every string the run produced is
escaped (``html_parts.esc``). Every table sorts by the column whose header is clicked (a second click
reverses); numbers sort as numbers. Opened with ``#selftest`` the page sorts each table by each column
both ways, checks the order, and writes the verdict into ``#selftest-result`` (the browser test reads it).
"""
import logging
import re
from typing import Any, Dict, List, Tuple

from .html_parts import block, esc, inline, markdown, table
from .state import SOURCE_FILE, rendered

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1f23;background:#fafbfc}
main{max-width:1200px;margin:0 auto;padding:16px 28px 48px;background:#fff}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;border-bottom:1px solid #d0d7de;padding-bottom:3px;margin-top:30px}
h3{font-size:16px}h4,h5,h6{font-size:14px}
nav{font-size:13px;margin:8px 0 16px}nav a{margin-right:12px;color:#0550ae;text-decoration:none}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f1f4f8;cursor:pointer;user-select:none;white-space:nowrap}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
tbody tr:nth-child(even){background:#f8f9fb}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;border:1px solid #d0d7de}
.status-ok{color:#116329}.status-failed,.status-interrupted{color:#b31d28}
.warnings li{color:#8a4600}.note{color:#57606a;font-style:italic}
.graph{overflow:auto;border:1px solid #d0d7de;max-height:900px}
.file{border-left:3px solid #d0d7de;padding-left:12px}
figure{margin:8px 0}figure img{max-width:100%;border:1px solid #d0d7de}figcaption{font-size:12px;color:#57606a}
.device-DPU{color:#0d47a1}.device-CPU{color:#b71c1c;font-weight:bold}
.artifacts td:nth-child(3){font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
#selftest-result:empty,#script-errors:empty{display:none}#script-errors{color:#b31d28}
"""

# The sort: a cell's key is its data-sort or its text; a column whose keys all read as numbers sorts
# numerically, else as text in code point order (empty cells last); ties keep the table's order.
SCRIPT = r"""
(function(){
"use strict";
var errors=document.getElementById("script-errors");
window.addEventListener("error",function(e){errors.textContent+="script error: "+e.message+"\n";});
function key(cell){var s=cell?cell.getAttribute("data-sort"):"";if(s===null)s=cell.textContent;return s.trim();}
function num(s){if(/^[-+]?inf/i.test(s))return s.charAt(0)==="-"?-Infinity:Infinity;
 var m=/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?/i.exec(s);return m?parseFloat(m[0]):NaN;}
function keys(table,col){var rows=Array.prototype.slice.call(table.tBodies[0].rows);
 var k=rows.map(function(r){return key(r.cells[col]);});
 var numeric=k.every(function(s){return s===""||!isNaN(num(s));})&&k.some(function(s){return s!=="";});
 return {rows:rows,k:k,numeric:numeric};}
function cmp(a,b,numeric){if(a===b)return 0;if(a==="")return 1;if(b==="")return -1;
 var x=numeric?num(a):a,y=numeric?num(b):b;return x<y?-1:x>y?1:0;}
function sortBy(table,col,dir){var d=keys(table,col),idx=d.rows.map(function(_,i){return i;});
 idx.sort(function(i,j){var c=cmp(d.k[i],d.k[j],d.numeric);if(d.k[i]===""||d.k[j]==="")return c||i-j;return dir*c||i-j;});
 var body=table.tBodies[0];idx.forEach(function(i){body.appendChild(d.rows[i]);});
 Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,i){
  if(i===col)th.setAttribute("aria-sort",dir>0?"ascending":"descending");else th.removeAttribute("aria-sort");});}
function onClick(e){var th=e.currentTarget,table=th.closest("table");
 sortBy(table,th.cellIndex,th.getAttribute("aria-sort")==="ascending"?-1:1);}
var tables=document.querySelectorAll("table.sortable");
Array.prototype.forEach.call(tables,function(t){if(!t.tHead||!t.tBodies.length)return;
 Array.prototype.forEach.call(t.tHead.rows[0].cells,function(th){th.addEventListener("click",onClick);
  th.title="sort by this column";});});
function ordered(table,col,dir){var d=keys(table,col),k=d.k.filter(function(s){return s!=="";});
 for(var i=1;i<k.length;i++)if(dir*cmp(k[i-1],k[i],d.numeric)>0)return false;
 var seen=false;for(i=0;i<d.k.length;i++){if(d.k[i]==="")seen=true;else if(seen)return false;}return true;}
if(location.hash==="#selftest"){var bad=[],n=0,cols=0;
 Array.prototype.forEach.call(tables,function(t,ti){if(!t.tHead||!t.tBodies.length)return;n++;
  Array.prototype.forEach.call(t.tHead.rows[0].cells,function(th,c){cols++;
   [1,-1].forEach(function(dir){th.click();
    if(th.getAttribute("aria-sort")!==(dir>0?"ascending":"descending")||!ordered(t,c,dir))
     bad.push("table "+ti+" column "+c+(dir>0?" up":" down"));});});});
 document.getElementById("selftest-result").textContent=bad.length?"selftest FAILED: "+bad.join("; "):
  "selftest ok: "+n+" tables, "+cols+" columns sorted both ways";}
})();
"""


def _headline(st: Dict[str, Any]) -> Tuple[str, str]:
    """(state, the status line) as report.md words it."""
    state = st.get("state")
    text = {"ok": "finished: %s" % ", ".join(st.get("steps", [])),
            "failed": "FAILED at step %s: %s" % (st.get("step"), st.get("error")),
            "interrupted": "INTERRUPTED at step %s%s" % (st.get("step"), ": %s" % st["error"] if st.get("error") else ""),
            "running": "running step %s (pid %s, started %s)" % (st.get("step"), st.get("pid"), st.get("started"))
            }.get(state, "unknown")
    return str(state), text


def render_html(r: Dict[str, Any], results: Dict[str, Any], work_dir: str) -> str:
    """report.html for report.json's content ``r`` and the typed step results ``results`` (in pipeline
    order) of the run folder ``work_dir`` (its plots are read and inlined; no path of it is written)."""
    from ..data.summary import source_section
    run = r["run"]
    state, status = _headline(r["status"])
    parts = ['<p>status: <b class="status-%s">%s</b></p>\n<ul><li>config: <code>%s</code> (hash of the resolved '
             'settings <code>%s</code>)</li><li>backend: <code>%s</code>, target: <code>%s</code></li></ul>'
             % (esc(state), esc(status), esc(run["config"]), esc(str(run["config_sha256"])[:16]),
                esc(run["backend"]), esc(run["target"]))]
    summary = [line for name, res in results.items() for line in rendered(name, lambda: res.summary_lines(""))]
    if summary:
        parts.append("<h2>Summary</h2>\n<ul>%s</ul>" % "".join("<li>%s</li>" % inline(s) for s in summary))
    if r["warnings"]:
        parts.append('<h2>Warnings</h2>\n<ul class="warnings">%s</ul>' % "".join("<li>%s</li>" % esc(w)
                                                                                for w in r["warnings"]))
    if r["quantizer_changes"]:
        parts.append("<h2>Changes the quantizer makes for the DPU</h2>\n<ul>%s</ul>"
                     % "".join("<li>%s</li>" % esc(c) for c in r["quantizer_changes"]))
    for name, res in results.items():
        blocks = rendered(name, lambda: res.report_html(""))
        parts.append(rendered(name, lambda: "\n".join(block(b, work_dir) for b in blocks)))
    try:
        parts.append(markdown(source_section(r.get("source")), work_dir))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        logging.getLogger("pipeline").warning("%s: its content cannot be shown (%s: %s)", SOURCE_FILE, type(exc).__name__, exc)
    arts = [[a["path"] + (" (left by an unfinished step)" if a.get("incomplete") else ""), a["bytes"], a["sha256"]]
            for a in r["artifacts"]]
    parts.append('<h2>Artifacts</h2>\n<div class="artifacts">%s</div>' % (
        table(["file", "bytes", "sha256"], arts) if arts else "<p>none</p>"))
    versions = "<ul>%s</ul>" % "".join("<li>%s: %s</li>" % (esc(k), esc(v)) for k, v in sorted(r["versions"].items()))
    if r.get("support"):
        versions += "\n<p>Support: %s.</p>" % esc(r["support"]["text"])
    parts.append("<h2>Versions</h2>\n" + versions)
    body, titles = _numbered("\n".join(p for p in parts if p.strip()))
    nav = " ".join('<a href="#s%d">%s</a>' % (i, t) for i, t in enumerate(titles))
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<title>Run report: %s</title>\n<style>%s</style>\n</head>\n<body>\n<main>\n"
            "<h1>Run report: %s</h1>\n<nav>%s</nav>\n<pre id=\"selftest-result\"></pre><pre id=\"script-errors\"></pre>\n"
            "%s\n</main>\n<script>%s</script>\n</body>\n</html>\n"
            % (esc(run["name"]), STYLE, esc(run["name"]), nav, body, SCRIPT))


_H2 = re.compile(r"<h2>(.*?)</h2>")


def _numbered(body: str) -> Tuple[str, List[str]]:
    """``body`` with an id on each ``<h2>`` (s0, s1, ...) and the headings' HTML, for the page's contents."""
    titles = []  # type: List[str]

    def number(m: Any) -> str:
        titles.append(_TAG.sub("", m.group(1)))
        return '<h2 id="s%d">%s</h2>' % (len(titles) - 1, m.group(1))
    return _H2.sub(number, body), titles


_TAG = re.compile(r"<[^>]*>")
