"""YAML loading bounded in time and memory: the config loader refuses alias bombs before anything walks them.

``yaml.safe_load`` builds objects only of plain types, but it keeps aliases (``*a``) as shared
references: a "billion laughs" document of a few hundred bytes (``a: &a [x, x, ...]``,
``b: &b [*a, *a, ...]``, ...) loads in microseconds into a structure that, walked, holds 10**9
strings. Hashing, printing, validating or deep-copying it then takes minutes and gigabytes.

``BoundedSafeLoader`` is PyYAML's ``SafeLoader`` with a composer that counts, for every node it
builds, the number of nodes the node stands for once every alias in it is expanded. Aliases are
counted when they are composed (the anchored node's count is already known), so the count costs
one addition per node of the document as written, and loading stops with ``yaml.YAMLError`` as
soon as the expanded document would exceed ``MAX_EXPANDED_NODES`` nodes or ``MAX_DEPTH`` levels of
nesting, or an alias refers to a node that contains it (a recursive structure). The file itself is
refused above ``MAX_BYTES``. Ordinary anchors and merge keys (``<<: *defaults``) keep working. A key
written twice in one mapping is refused with both lines (PyYAML keeps the later value silently).
"""
from typing import Any, Dict

import yaml

MAX_BYTES = 4 << 20  # a config is a few KiB; 4 MiB leaves room for long stage lists and options
MAX_EXPANDED_NODES = 100000  # nodes after alias expansion (the digits config has about 80)
MAX_DEPTH = 64  # nesting levels (PyYAML's recursive composer would hit Python's recursion limit)


class YAMLBoundError(yaml.YAMLError):
    """The document would expand past the loader's bounds (see the module docstring)."""


class BoundedSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses documents whose alias expansion exceeds ``max_nodes`` nodes,
    nesting deeper than ``max_depth``, or aliases to an enclosing node. Raises ``YAMLBoundError``
    (a ``yaml.YAMLError``) with the line and column where the bound was passed."""

    max_nodes = MAX_EXPANDED_NODES
    max_depth = MAX_DEPTH

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._expanded = {}  # type: Dict[int, int]  # id(node) -> node count once expanded
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None and id(node) not in self._expanded:
                raise YAMLBoundError("alias *%s at %s refers to a node that contains it (a recursive "
                                     "structure); a config cannot hold one" % (event.anchor, _where(event)))
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise YAMLBoundError("the document nests deeper than %d levels at %s; a config does not need "
                                     "that many" % (self.max_depth, _where(self.peek_event())))
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._expanded[id(child)] for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            size = 1 + sum(self._expanded[id(k)] + self._expanded[id(v)] for k, v in node.value)
        else:
            size = 1
        if size > self.max_nodes:
            raise YAMLBoundError("the document expands to more than %d values at the node ending at %s: "
                                 "aliases (*name) repeat their anchor's content, and nested aliases multiply it "
                                 "(a 'billion laughs' document). Write the values out, or use fewer aliases"
                                 % (self.max_nodes, _where(node)))
        self._expanded[id(node)] = size
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A mapping, refused when a key is written twice in it (YAML forbids it; PyYAML would keep the
        later value without a word). Keys a merge (``<<: *defaults``) brings in may be overridden."""
        if isinstance(node, yaml.MappingNode):
            seen = {}  # type: Dict[Any, Any]
            for key, _ in node.value:
                if key.tag == "tag:yaml.org,2002:merge" or not isinstance(key, yaml.ScalarNode):
                    continue
                if (key.tag, key.value) in seen:
                    raise YAMLBoundError("the key %r is written twice in one mapping, at %s and at %s; give it once "
                                         "(the later value would silently win)"
                                         % (key.value, _where(seen[(key.tag, key.value)], start=True),
                                            _where(key, start=True)))
                seen[(key.tag, key.value)] = key
        return super().construct_mapping(node, deep)


def _where(item: Any, start: bool = False) -> str:
    """Where ``item`` (a node or event) ends in the document, or where it starts."""
    mark = None if start else getattr(item, "end_mark", None)
    mark = mark or getattr(item, "start_mark", None)
    return "line %d, column %d" % (mark.line + 1, mark.column + 1) if mark is not None else "an unknown position"


def load_bounded(text: str) -> Any:
    """Parse one YAML document with ``BoundedSafeLoader`` (plain types only, bounded expansion).

    Args:
        text: the document (str); more than ``MAX_BYTES`` UTF-8 bytes is refused.

    Returns:
        The parsed value (dict, list, str, int, float, bool, None, date).

    Raises:
        yaml.YAMLError: malformed YAML, or a ``YAMLBoundError`` for a document past the bounds.
    """
    size = len(text.encode("utf-8"))
    if size > MAX_BYTES:
        raise YAMLBoundError("the document is %d bytes, more than the %d a config may have" % (size, MAX_BYTES))
    loader = BoundedSafeLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
