"""The source's part of the run report: ``source.json`` (the source's ``describe()``, its splits and
the sha256 before and after the run) as report.md lines and as the command line's summary lines."""
from typing import Any, Dict, List, Optional


def source_section(src: Optional[Dict[str, Any]]) -> List[str]:
    """report.md's "Source data" section (empty without a description): kind, path, shape, dtype,
    layout, whether memory-mapped, unchanged by the run, each split's images and classes, the
    classes of an image folder, the files it skipped, the run folders it left out."""
    if not src:
        return []
    lines = ["## Source data", "",
             "- %s%s: shape %s, %s, %s%s" % (src.get("kind"), " `%s`" % src["path"] if src.get("path") else "",
                                            src.get("shape"), src.get("dtype"), src.get("layout"),
                                            ", memory-mapped" if src.get("mmap") else "")]
    if "unchanged" in src:
        lines.append("- unchanged by the run: **%s** (sha256 `%s`)" % (src["unchanged"], src["sha256_after"][:16]))
    for part, info in sorted((src.get("splits") or {}).items()):
        lines.append("- %s split (%s): %d images%s" % (
            part, src.get("split_order"), info["images"],
            "; classes " + ", ".join("%s (%d)" % kv for kv in info["classes"].items()) if info.get("classes") else ""))
    if src.get("class_counts"):
        lines.append("- classes (images): %s" % ", ".join("%s (%d)" % kv for kv in src["class_counts"].items()))
    if src.get("skipped"):
        lines.append("- skipped %d unreadable files:" % src["skipped"])
        lines += ["  - `%s`: %s" % (f["file"], f["error"]) for f in src.get("skipped_files", [])]
    runs = src.get("excluded_run_folders") or []
    if runs:
        lines.append("- left out %d run folder%s inside the image folder (a run folder's files are never data): %s"
                     % (len(runs), "" if len(runs) == 1 else "s", ", ".join("`%s`" % r for r in runs)))
    return lines + [""]


def source_summary(src: Optional[Dict[str, Any]]) -> List[str]:
    """The command line's lines about the source: skipped files, run folders left out, and whether the
    run left it unchanged."""
    src = src or {}
    out = []
    if src.get("skipped"):
        out.append("skipped %d unreadable image files (listed in the report)" % src["skipped"])
    runs = src.get("excluded_run_folders") or []
    if runs:
        out.append("%d run folder%s inside the image folder %s left out, never read as data (listed in the report)"
                   % (len(runs), "" if len(runs) == 1 else "s", "was" if len(runs) == 1 else "were"))
    if "unchanged" in src:
        out.append("source data unchanged: %s" % src["unchanged"])
    return out
