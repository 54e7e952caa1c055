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


def split_warnings(src: Optional[Dict[str, Any]]) -> List[str]:
    """A warning for each split that holds only some of the data's classes (those any split holds): a
    calibration on some classes, an accuracy on some, a training on some. Most often ``split_order:
    contiguous`` on a file sorted by label; ``shuffled`` splits stratify by label."""
    splits = (src or {}).get("splits") or {}
    counts = {part: info.get("classes") for part, info in splits.items() if info.get("images")}
    if not counts or any(c is None for c in counts.values()):
        return []  # no labels: nothing to tell
    every = sorted({k for c in counts.values() for k, n in c.items() if n},
                   key=lambda k: (0, int(k), "") if k.lstrip("-").isdigit() else (1, 0, k))
    out = []
    for part in ("train", "calib", "eval"):
        held = {k for k, n in (counts.get(part) or {}).items() if n}
        if part in counts and held != set(every):
            missing = [k for k in every if k not in held]
            out.append("the %s split holds %d of the data's %d classes (none of %s)%s; give data.split_order: "
                       "shuffled (splits stratified by label)"
                       % (part, len(held), len(every), ", ".join(str(k) for k in missing[:5])
                          + (" and %d more" % (len(missing) - 5) if len(missing) > 5 else ""),
                          ": split_order contiguous cuts the file in slices, and its labels are grouped"
                          if src.get("split_order") == "contiguous" else ""))
    return out


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
