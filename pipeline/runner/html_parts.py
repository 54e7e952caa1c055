"""The pieces of report.html (``report_html``): every string escaped, nothing fetched.

A step result hands the HTML report a list of blocks (``pipeline.steps.base.StepResult.report_html``),
plain data rendered here, so escaping happens in one place:

- ``{"markdown": [line, ...]}``: the subset of Markdown report.md uses (``#`` headings, ``-`` lists,
  ``|`` tables, code fences, paragraphs; inline `` `code` `` and ``**bold**``; ``![alt](path)``, a PNG
  of the run folder inlined as a ``data:`` URI). Links are shown as text, never followed.
- ``{"table": {"title", "columns": [...], "rows": [[cell, ...]], "note"}}``: a table; a cell is a
  string or a number (a number sorts as one).
- ``{"pre": text, "title": ...}``: preformatted text.
- ``{"svg": text, "title": ...}``: an SVG picture, inlined only when it holds nothing but drawing
  elements (``clean_svg``): re-serialized from its parse, no script, no event handler, no link.
- ``{"markdown_file": path, "sha256": ..., "title": ...}``: a Markdown file of the run folder (the
  compile plan), shown when its sha256 is the one the step recorded.

Every table is sortable (the page's script: a click on a header sorts by that column).
"""
import base64
import hashlib
import os
import re
from html import escape
from html.parser import HTMLParser
from typing import Any, Dict, List, Optional, Sequence

MAX_INLINE_BYTES = 8 << 20  # the largest image or Markdown file inlined
_FENCE = "```"
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)$")
_INLINE = re.compile(r"(`[^`]*`)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_SEPARATOR = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?$")


def esc(value: Any) -> str:
    """``value`` as text for an HTML element or a quoted attribute."""
    return escape("" if value is None else str(value), quote=True)


def inline(text: str) -> str:
    """One line of Markdown text as HTML: escaped, `` `code` `` and ``**bold**`` marked up."""
    out = []
    for part in _INLINE.split(text):
        if len(part) >= 2 and part.startswith("`") and part.endswith("`"):
            out.append("<code>%s</code>" % esc(part[1:-1]))
        else:
            out.append(_BOLD.sub(lambda m: "<b>%s</b>" % m.group(1), esc(part)))
    return "".join(out)


def table(columns: Sequence[Any], rows: Sequence[Sequence[Any]], cell: Any = None) -> str:
    """A sortable table; a numeric cell carries its value in ``data-sort`` (the header-click sort reads it)."""
    render = cell or esc
    head = "".join('<th scope="col">%s</th>' % render(c) for c in columns)
    body = []
    for row in rows:
        cells = []
        for value in row:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            cells.append('<td%s>%s</td>' % (' data-sort="%s"' % esc(repr(float(value))) if number else "",
                                            render(value)))
        body.append("<tr>%s</tr>" % "".join(cells))
    return ('<table class="sortable"><thead><tr>%s</tr></thead><tbody>\n%s\n</tbody></table>'
            % (head, "\n".join(body)))


def _cells(line: str) -> List[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|"):
        line = line[:-1]
    return [c.strip() for c in line.split("|")]


def inside(work_dir: str, rel: str) -> Optional[str]:
    """The path of ``rel`` when it names a file inside the run folder ``work_dir``, else None."""
    if not work_dir or os.path.isabs(rel):
        return None
    root = os.path.realpath(work_dir)
    path = os.path.realpath(os.path.join(root, rel))
    if os.path.commonpath([root, path]) != root or not os.path.isfile(path):
        return None
    return path


def image(alt: str, rel: str, work_dir: str) -> str:
    """``<img>`` of the PNG ``rel`` of the run folder as a data: URI; a note where it cannot be shown."""
    path = inside(work_dir, rel) if rel.lower().endswith(".png") else None
    data = b""
    if path is not None and os.path.getsize(path) <= MAX_INLINE_BYTES:
        with open(path, "rb") as f:
            data = f.read()
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return '<p class="note">(%s: %s is not here as a PNG)</p>' % (esc(alt), esc(rel))
    return '<figure><img alt="%s" src="data:image/png;base64,%s"><figcaption>%s</figcaption></figure>' % (
        esc(alt), base64.b64encode(data).decode("ascii"), esc(alt))


def markdown(lines: Sequence[str], work_dir: str, shift: int = 0) -> str:
    """report.md's Markdown subset as HTML (module docstring); headings ``shift`` levels down (a file
    shown inside a section)."""
    flat = [part for line in lines for part in str(line).split("\n")]
    out, i = [], 0  # type: List[str], int
    while i < len(flat):
        line = flat[i]
        stripped = line.strip()
        if not stripped:
            i += 1
        elif stripped.startswith(_FENCE):
            j = i + 1
            while j < len(flat) and not flat[j].strip().startswith(_FENCE):
                j += 1
            out.append("<pre><code>%s</code></pre>" % esc("\n".join(flat[i + 1:j])))
            i = j + 1
        elif stripped.startswith("#"):
            level = min(len(stripped) - len(stripped.lstrip("#")) + shift, 6)
            out.append("<h%d>%s</h%d>" % (level, inline(stripped.lstrip("#").strip()), level))
            i += 1
        elif _IMAGE.match(stripped):
            m = _IMAGE.match(stripped)
            out.append(image(m.group(1), m.group(2), work_dir))
            i += 1
        elif stripped.startswith("|") and i + 1 < len(flat) and _SEPARATOR.match(flat[i + 1].strip()):
            j = i + 2
            while j < len(flat) and flat[j].strip().startswith("|"):
                j += 1
            out.append(table(_cells(stripped), [_cells(r) for r in flat[i + 2:j]], cell=inline))
            i = j
        elif stripped.startswith("- "):
            items = []
            while i < len(flat) and flat[i].strip().startswith("- "):
                items.append("<li>%s</li>" % inline(flat[i].strip()[2:]))
                i += 1
            out.append("<ul>%s</ul>" % "".join(items))
        else:
            para = []
            while i < len(flat) and flat[i].strip() and not _starts_block(flat, i):
                para.append(inline(flat[i].strip()))
                i += 1
            out.append("<p>%s</p>" % "\n".join(para))
    return "\n".join(out)


def _starts_block(flat: List[str], i: int) -> bool:
    s = flat[i].strip()
    return (s.startswith(("#", "- ", _FENCE)) or bool(_IMAGE.match(s))
            or (s.startswith("|") and i + 1 < len(flat) and bool(_SEPARATOR.match(flat[i + 1].strip()))))


# the drawing elements and attributes an inlined SVG may hold (the inspection's graph uses these)
SVG_TAGS = {"svg", "g", "defs", "marker", "path", "rect", "circle", "ellipse", "line", "polyline", "polygon",
            "text", "tspan", "title", "desc"}
SVG_ATTRS = {"xmlns", "width", "height", "viewbox", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "rx", "ry",
             "d", "points", "fill", "stroke", "stroke-width", "stroke-dasharray", "opacity", "fill-opacity",
             "font-family", "font-size", "font-weight", "text-anchor", "dominant-baseline", "transform", "class",
             "id", "marker-end", "marker-start", "orient", "refx", "refy", "markerwidth", "markerheight",
             "markerunits", "preserveaspectratio"}
_URL = re.compile(r"url\(\s*([^)]*)\)", re.I)


class _SvgCleaner(HTMLParser):
    """Re-serializes an SVG from its parse, refusing (``bad``) any element or attribute outside the lists above."""

    def __init__(self) -> None:
        HTMLParser.__init__(self, convert_charrefs=True)
        self.out = []  # type: List[str]
        self.bad = None  # type: Optional[str]
        self.depth = 0

    def _open(self, tag: str, attrs: Any, close: bool) -> None:
        if tag not in SVG_TAGS:
            self.bad = self.bad or "element <%s>" % tag
            return
        parts = [tag]
        for name, value in attrs:
            value = "" if value is None else value
            if not (name in SVG_ATTRS or name.startswith("data-")) or any(
                    not u.strip().strip("'\"").startswith("#") for u in _URL.findall(value)):
                self.bad = self.bad or "attribute %s of <%s>" % (name, tag)
                return
            parts.append('%s="%s"' % (name, esc(value)))
        self.out.append("<%s%s>" % (" ".join(parts), " /" if close else ""))
        self.depth += 0 if close else 1

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self._open(tag, attrs, False)

    def handle_startendtag(self, tag: str, attrs: Any) -> None:
        self._open(tag, attrs, True)

    def handle_endtag(self, tag: str) -> None:
        if tag in SVG_TAGS and self.depth > 0:
            self.out.append("</%s>" % tag)
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        self.out.append(esc(data))

    def handle_pi(self, data: str) -> None:  # the <?xml ...?> prolog: dropped
        pass

    def handle_decl(self, decl: str) -> None:
        pass

    def unknown_decl(self, data: str) -> None:  # CDATA and the like: refused
        self.bad = self.bad or "declaration"


def clean_svg(text: str) -> Optional[str]:
    """``text`` (an SVG document) re-serialized for inlining, or None when it holds anything beyond drawing
    elements (a script, an event handler, a link, a foreign object, an outside url())."""
    parser = _SvgCleaner()
    parser.feed(text)
    parser.close()
    if parser.bad or parser.depth:
        return None
    return "".join(parser.out)


def markdown_file(rel: str, sha256: Optional[str], work_dir: str) -> str:
    """A Markdown file of the run folder as HTML, when its sha256 is ``sha256`` (the step's record)."""
    path = inside(work_dir, rel)
    if path is None or os.path.getsize(path) > MAX_INLINE_BYTES:
        return '<p class="note">(%s is not here)</p>' % esc(rel)
    with open(path, "rb") as f:
        data = f.read()
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        return '<p class="note">(%s changed since the step wrote it: not shown)</p>' % esc(rel)
    return markdown(data.decode("utf-8", "replace").splitlines(), os.path.dirname(path), shift=2)


def block(b: Dict[str, Any], work_dir: str) -> str:
    """One block of a step's ``report_html`` as HTML (module docstring); an unknown kind is a ValueError."""
    title = "<h3>%s</h3>\n" % esc(b["title"]) if b.get("title") else ""
    if "markdown" in b:
        return title + markdown(b["markdown"], work_dir)
    if "table" in b:
        t = b["table"]
        note = '\n<p class="note">%s</p>' % inline(t["note"]) if t.get("note") else ""
        return ("<h3>%s</h3>\n" % esc(t["title"]) if t.get("title") else "") + table(t["columns"], t["rows"]) + note
    if "pre" in b:
        return title + "<pre>%s</pre>" % esc(b["pre"])
    if "svg" in b:
        svg = clean_svg(b["svg"])
        return title + ('<div class="graph">%s</div>' % svg if svg is not None else
                        '<p class="note">(the picture holds more than a drawing: not shown)</p>')
    if "markdown_file" in b:
        return title + '<div class="file">%s</div>' % markdown_file(b["markdown_file"], b.get("sha256"), work_dir)
    raise ValueError("unknown report block %s" % sorted(b))
