"""How many files of ``pipeline/`` name an op family outside its own unit: the files a change to that op
(or a new op like it) touches, in two trees side by side.

For each family of the op list (``pipeline.ops.RECORDS``, read from this checkout) the keys are what the
rest of the code would write to mean one of its ops: the names its type constants are bound to
(``LEAKY_RELU``), its nndct type strings (``"nndct_leaky_relu"``), and, where the records carry them, the
XIR op types its units write (``"leaky-relu"``) and the inspector's names for it (``"leaky_relu"``). A file
counts when its code (names and string literals, docstrings and comments left out: Python's tokenizer)
holds one of the keys. The family's unit (``pipeline/ops/<family>.py`` or ``pipeline/ops/<family>/``)
and the literal list (``pipeline/ops/__init__.py``) are not counted: they are where an op is added.

``python scripts/op_footprint.py [--before REV] [--after REV]`` prints one row per family (files before,
files after, the files after) and the totals; ``--after`` defaults to the working tree. The keys come
from the working tree's records in both columns, so both count the same thing.
"""
import argparse
import io
import os
import re
import subprocess
import sys
import tokenize
from typing import Dict, Iterable, List, Optional, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def _keys() -> Dict[str, Tuple[Set[str], Set[str]]]:
    """family -> (names, string literals) that mean one of its ops."""
    from pipeline import ops
    bound = {}  # type: Dict[str, Set[str]]
    for name in dir(ops):
        value = getattr(ops, name)
        if name.isupper() and isinstance(value, str):
            bound.setdefault(value, set()).add(name)
    keys = {}
    for record in ops.RECORDS:
        names, strings = set(), set()
        for op in record.specs:
            names |= bound.get(op, set())
            strings.add(op)
        for attr in ("xir_ops", "inspect_names"):
            table = getattr(record, attr, None)
            if isinstance(table, dict):
                strings |= {k for k in table if isinstance(k, str)}
                strings |= {v for v in table.values() if isinstance(v, str)}
        for rule in getattr(record, "dpu_rule", {}).values():  # the inspector's names (a DpuRule's names)
            strings |= set(getattr(rule, "names", ()))
        keys[record.family] = (names, strings)
    return keys


def _files(rev: Optional[str]) -> Dict[str, str]:
    """path -> source of every .py file under pipeline/ in ``rev`` (the working tree when None)."""
    out = {}
    if rev is None:
        for folder, _, names in os.walk(os.path.join(ROOT, "pipeline")):
            for n in names:
                if n.endswith(".py"):
                    path = os.path.join(folder, n)
                    with open(path, encoding="utf-8") as f:
                        out[os.path.relpath(path, ROOT)] = f.read()
        return out
    listing = subprocess.check_output(["git", "-C", ROOT, "ls-tree", "-r", "--name-only", rev, "pipeline"])
    for path in listing.decode().split():
        if path.endswith(".py"):
            out[path] = subprocess.check_output(["git", "-C", ROOT, "show", "%s:%s" % (rev, path)]).decode()
    return out


def _code_tokens(source: str) -> Tuple[Set[str], Set[str]]:
    """The names and the string literals' values of ``source``'s code (docstrings and comments left out)."""
    names, strings = set(), set()
    previous = tokenize.NEWLINE
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return names, strings
    for tok in tokens:
        if tok.type == tokenize.NAME:
            names.add(tok.string)
        elif tok.type == tokenize.STRING and previous not in (tokenize.NEWLINE, tokenize.INDENT, tokenize.NL):
            m = re.match(r"^[rbuRBU]*(['\"])(.*)\1$", tok.string, re.S)
            if m:
                strings.add(m.group(2))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            previous = tok.type
    return names, strings


def _own(path: str, family: str) -> bool:
    return path in ("pipeline/ops/%s.py" % family, "pipeline/ops/__init__.py") \
        or path.startswith("pipeline/ops/%s/" % family)


def footprint(rev: Optional[str], keys: Dict[str, Tuple[Set[str], Set[str]]]) -> Dict[str, List[str]]:
    """family -> the files outside its unit whose code names one of its ops."""
    tokens = {path: _code_tokens(src) for path, src in _files(rev).items()}
    out = {}
    for family, (names, strings) in keys.items():
        out[family] = sorted(p for p, (n, s) in tokens.items()
                             if not _own(p, family) and (n & names or s & strings))
    return out


def main(argv: Iterable[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="b3852eb", help="the tree before (a git revision)")
    parser.add_argument("--after", default=None, help="the tree after (a git revision; default: the working tree)")
    args = parser.parse_args(list(argv))
    keys = _keys()
    before, after = footprint(args.before, keys), footprint(args.after, keys)
    print("| family | files before (%s) | files after (%s) | the files after |" % (args.before, args.after or "worktree"))
    print("|---|---|---|---|")
    for family in keys:
        print("| %s | %d | %d | %s |" % (family, len(before[family]), len(after[family]),
                                         ", ".join(p[len("pipeline/"):] for p in after[family]) or "-"))
    tb, ta = sum(len(v) for v in before.values()), sum(len(v) for v in after.values())
    print("\ntotal files x families: before %d, after %d (%.2fx fewer)" % (tb, ta, tb / max(ta, 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
