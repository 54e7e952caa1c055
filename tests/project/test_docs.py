"""The project's reference in docs/: every ``docs/<file>.md#<section>`` citation resolves.

Code comments and docstrings cite the Vitis AI facts they rest on as ``docs/<file>.md#<section>``;
the section is the GitHub anchor of a heading (lower case, punctuation dropped, spaces to '-').
"""
import os
import re
import subprocess

import pytest

from tests.support import REPO

DOCS = os.path.join(REPO, "docs")
CITATION = re.compile(r"docs/([A-Za-z0-9_]+\.md)(?:#([A-Za-z0-9_-]+))?")
LINK = re.compile(r"\]\(([A-Za-z0-9_]+\.md)?(?:#([A-Za-z0-9_-]+))?\)")


def anchor(heading):
    """GitHub's anchor for a Markdown heading's text."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(name):
    with open(os.path.join(DOCS, name)) as f:
        return {anchor(line.lstrip("#")) for line in f if re.match(r"#{1,6} ", line)}


def cited_files():
    out = subprocess.run(["git", "ls-files", "pipeline", "tests", "scripts", "docker", "configs", "README.md"],
                         cwd=REPO, stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.split()
    return [f for f in out if f.endswith((".py", ".md", ".yaml", ".sh", ".txt"))]


def citations():
    found = []
    for rel in cited_files():
        with open(os.path.join(REPO, rel), errors="replace") as f:
            for no, line in enumerate(f, 1):
                found += [("%s:%d" % (rel, no), m.group(1), m.group(2)) for m in CITATION.finditer(line)]
    return found


def test_anchor_follows_githubs_rule():
    assert anchor("The caller's model is rewritten") == "the-callers-model-is-rewritten"
    assert anchor("arch.json") == "archjson"
    assert anchor("torch_quantizer arguments") == "torch_quantizer-arguments"
    assert anchor("The Vitis AI 3.5 image") == "the-vitis-ai-35-image"


def test_code_cites_the_docs():
    # the code's facts point here; a refactor that drops them all should fail this
    assert len(citations()) >= 80


@pytest.mark.parametrize("where,name,section", citations())
def test_every_docs_citation_resolves(where, name, section):
    path = os.path.join(DOCS, name)
    assert os.path.isfile(path), "%s cites docs/%s, which does not exist" % (where, name)
    if section:
        assert section in anchors(name), "%s cites docs/%s#%s; headings there: %s" % (
            where, name, section, sorted(anchors(name)))


def test_links_between_docs_resolve():
    for name in sorted(os.listdir(DOCS)):
        if not name.endswith(".md"):
            continue
        with open(os.path.join(DOCS, name)) as f:
            text = f.read()
        for m in LINK.finditer(text):
            target = m.group(1) or name
            assert os.path.isfile(os.path.join(DOCS, target)), "%s links to missing %s" % (name, target)
            if m.group(2):
                assert m.group(2) in anchors(target), "%s links to %s#%s" % (name, target, m.group(2))


def test_no_citation_points_outside_the_repository():
    """The old "facts N.N" citations named a document a user's clone does not have."""
    old = re.compile(r"vitis_ai_facts|\bfacts (?:section )?[0-9]+(?:\.[0-9]+)*\b")
    found = []
    for rel in cited_files():
        if rel == "tests/project/test_docs.py":
            continue
        with open(os.path.join(REPO, rel), errors="replace") as f:
            found += ["%s:%d" % (rel, no) for no, line in enumerate(f, 1) if old.search(line)]
    assert not found, "cite docs/<file>.md#<section> instead: %s" % found
