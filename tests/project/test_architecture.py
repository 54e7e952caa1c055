"""The layout's rules, checked on the source (docs/architecture.md, "Floors" and "Rules the code keeps"): no
import cycle between pipeline's modules (an import inside a function counts: it runs when the function is
called), no module over 400 lines, the floors and rooms of the Floors block, the driver floor and the
data room name no backend, and only ``pipeline/steps/`` names a step. Each rule has a test that it
catches a violation, on modules made up for it."""
import ast
import os
import re

import pytest

from pipeline.quantizers.base import BACKENDS
from pipeline.steps import NAMES as STEP_NAMES
from tests.support import REPO

PACKAGE = os.path.join(REPO, "pipeline")
MAX_LINES = 400


def _modules():
    """``{dotted name: path}`` of every module under pipeline/."""
    out = {}
    for folder, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, name), os.path.dirname(PACKAGE))[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                out[".".join(rel)] = os.path.join(folder, name)
    return out


MODULES = _modules()


def _tree(name):
    with open(MODULES[name], encoding="utf-8") as f:
        return ast.parse(f.read(), MODULES[name])


def _imported(name, node, modules=None):
    """The pipeline modules an import statement names (relative imports resolved); ``modules``:
    ``{dotted name: path}`` (pipeline's own by default)."""
    modules = MODULES if modules is None else modules
    package = name if modules[name].endswith("__init__.py") else name.rpartition(".")[0]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "pipeline"]
    base = package.split(".")
    if node.level:
        base = base[:len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "pipeline":
        return []
    found = []
    for alias in node.names:
        sub = target + "." + alias.name
        found.append(sub if sub in modules else target)
    return found


def _imports(name, tree, modules, annotations):
    """The pipeline modules (of ``modules``) that the module ``name`` (parsed: ``tree``) imports, at the
    top of the file or inside a function or class alike: an import inside a function runs when the function
    is called, so it makes the same dependency. Those under ``if TYPE_CHECKING:`` (for annotations only,
    never run) only with ``annotations``."""
    out = set()
    stack = list(tree.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update(m for m in _imported(name, n, modules) if m in modules and m != name)
        elif isinstance(n, ast.If) and "TYPE_CHECKING" in ast.dump(n.test) and not annotations:
            stack.extend(n.orelse)
        else:
            stack.extend(ast.iter_child_nodes(n))
    return out


def _import_graph(sources=None, annotations=False, ancestors=False):
    """``{module: the modules it imports}`` of pipeline's modules, or of ``sources`` (``{dotted name: source
    text}``, modules made up for a test). Importing a.b.c runs a/__init__ and a/b/__init__ first: for the
    module cycles those edges are Python's, not the module's, and are left out unless ``ancestors`` (the
    rooms count a name imported from a package's ``__init__`` as an import of its room)."""
    if sources is None:
        modules, trees = MODULES, {name: _tree(name) for name in MODULES}
    else:
        modules = {name: name.replace(".", "/") + ".py" for name in sources}
        trees = {name: ast.parse(text) for name, text in sources.items()}
    return {name: {m for m in _imports(name, trees[name], modules, annotations)
                   if ancestors or not name.startswith(m + ".")} for name in modules}


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_pipeline_modules():
    assert _cycles(_import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_an_import_inside_a_function_closes_a_cycle():
    sources = {"pipeline.a": "from pipeline import b\n",
               "pipeline.b": "import os\n\n\ndef f():\n    from . import a\n    return a, os\n",
               "pipeline.c": "class C:\n    def m(self):\n        from pipeline.a import x\n        return x\n"}
    assert _import_graph(sources) == {"pipeline.a": {"pipeline.b"}, "pipeline.b": {"pipeline.a"},
                                      "pipeline.c": {"pipeline.a"}}
    assert _cycles(_import_graph(sources)) == [["pipeline.a", "pipeline.b"]]
    # an import for annotations only never runs: no cycle, but the room rules below still see it
    typing_only = dict(sources, **{"pipeline.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                 "    from pipeline import a\n"})
    assert _cycles(_import_graph(typing_only)) == []
    assert _import_graph(typing_only, annotations=True)["pipeline.b"] == {"pipeline.a"}


def test_no_module_is_over_400_lines():
    long = {}
    for name, path in MODULES.items():
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            long[name] = n
    assert long == {}


def _strings(name):
    return {n.value for n in ast.walk(_tree(name)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _all_imports(name):
    out = set()
    for n in ast.walk(_tree(name)):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update(_imported(name, n))
    return out


def _under(*rooms):
    return sorted(m for m in MODULES if any(m == "pipeline." + r or m.startswith("pipeline." + r + ".") for r in rooms))


BACKEND_MODULES = tuple(path.partition(":")[0] for path in BACKENDS.values()) + ("pipeline.quantizers.sim",)


@pytest.mark.parametrize("name", _under("steps", "runner", "data"))
def test_steps_driver_and_data_name_no_backend(name):
    assert not (_strings(name) & set(BACKENDS)), "names a backend: %s" % sorted(_strings(name) & set(BACKENDS))
    imported = [m for m in _all_imports(name) if any(m == b or m.startswith(b + ".") for b in BACKEND_MODULES)]
    assert imported == []


STEP_MODULES = {"pipeline.steps." + s for s in STEP_NAMES}


@pytest.mark.parametrize("name", sorted(m for m in MODULES if not m.startswith("pipeline.steps")))
def test_only_steps_import_a_step(name):
    assert sorted(_all_imports(name) & STEP_MODULES) == []


@pytest.mark.parametrize("name", _under("runner") + ["pipeline.cli", "pipeline.env"])
def test_the_driver_floor_names_no_step(name):
    assert not (_strings(name) & set(STEP_NAMES)), "names a step: %s" % sorted(_strings(name) & set(STEP_NAMES))


def test_the_command_line_imports_no_torch_before_a_command_needs_it():
    # `python -m pipeline targets|status|schema|--help` stay quick: the step graph is declarations only
    import subprocess
    import sys
    code = "import sys, pipeline.cli; print('torch' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, check=True).stdout
    assert out.split() == [b"False", b"False"]


# ---- the floors of docs/architecture.md ------------------------------------------------------------

def _room(name, floors=None):
    """A module's room: the deepest package inside a room that the Floors block names as a room of its own
    (``quantizers/sim/xmodel``), else the package under pipeline/ it is in, or the module itself."""
    floors = FLOORS if floors is None else floors
    parts = name.split(".")[1:]
    if not parts:
        return "__init__"
    for n in range(len(parts), 1, -1):
        if "/".join(parts[:n]) in floors:
            return "/".join(parts[:n])
    return parts[0]


def _doc_floors():
    """``{room: floor}`` from the block under "## Floors" in docs/architecture.md."""
    with open(os.path.join(REPO, "docs", "architecture.md"), encoding="utf-8") as f:
        text = f.read()
    block = text.split("## Floors", 1)[1].split("```", 2)[1]
    floors, floor = {}, None
    for line in block.splitlines():
        head, _, rest = line.strip().partition(" ")
        if head.isdigit():
            floor = int(head)
        elif len(line) - len(line.lstrip()) > 4:  # the description's own continuation line
            continue
        else:  # the floor's rooms, continued
            rest = line
        names = re.split(r"\s{2,}", rest.strip())[0]  # the rooms, then two spaces or more, then what they are
        for room in (n.strip() for n in names.split(",")):
            if room:
                floors[room] = floor
    return floors


FLOORS = _doc_floors()


def _room_imports(graph=None):
    """``{(room, imported room): [module, ...]}`` over every import of every module, inside functions too
    (``graph``: pipeline's, with annotations-only imports and names taken from a parent package)."""
    graph = _import_graph(annotations=True, ancestors=True) if graph is None else graph
    out = {}
    for name, targets in graph.items():
        for target in targets:
            if _room(target) != _room(name):
                out.setdefault((_room(name), _room(target)), []).append(name)
    return out


def _upward(graph=None):
    """Each import of a room from a floor above its own, as one line."""
    return sorted("%s (floor %d) imports %s (floor %d): %s" % (a, FLOORS[a], b, FLOORS[b], sorted(set(ms)))
                  for (a, b), ms in _room_imports(graph).items() if FLOORS[b] > FLOORS[a])


def _room_cycles(graph=None):
    """The groups of rooms that import each other (directly or round a circle)."""
    rooms = {}
    for a, b in _room_imports(graph):
        rooms.setdefault(a, set()).add(b)
        rooms.setdefault(b, set())
    return _cycles(rooms)


def test_every_room_is_on_a_floor_of_the_architecture_doc():
    rooms = {_room(m) for m in MODULES}
    assert sorted(rooms - set(FLOORS)) == [] and sorted(set(FLOORS) - rooms) == []


def test_no_module_imports_from_a_floor_above_its_own():
    assert _upward() == []


def test_no_two_rooms_import_each_other():
    assert _room_cycles() == []


def test_the_floor_rule_counts_an_import_inside_a_function():
    sources = {"pipeline.data.feed": "def f():\n    from pipeline.runner import driver\n    return driver\n",
               "pipeline.runner.driver": "from pipeline.data import feed\n"}
    assert _upward(_import_graph(sources)) == ["data (floor %d) imports runner (floor %d): ['pipeline.data.feed']"
                                               % (FLOORS["data"], FLOORS["runner"])]
    assert _room_cycles(_import_graph(sources)) == [["data", "runner"]]


def test_the_rooms_inside_quantizers_are_rooms_of_their_own():
    assert [_room("pipeline.quantizers." + m) for m in ("base", "sim.calib", "sim.xmodel", "sim.xmodel.lower",
                                                         "sim.export.onnx.builder", "sim.qat.tqt", "sim.backend")] == [
        "quantizers", "quantizers/sim", "quantizers/sim/xmodel", "quantizers/sim/xmodel", "quantizers/sim/export",
        "quantizers/sim/qat", "quantizers/sim/backend"]
    # the simulation's library importing its xmodel writer (which builds on it), inside a function
    sources = {"pipeline.quantizers.sim.ops": "def f():\n    from .xmodel import lower\n    return lower\n",
               "pipeline.quantizers.sim.xmodel.lower": "from ..ops import LEAKY_SLOPE\n"}
    graph = _import_graph(sources)
    assert _upward(graph) == ["quantizers/sim (floor %d) imports quantizers/sim/xmodel (floor %d): "
                              "['pipeline.quantizers.sim.ops']" % (FLOORS["quantizers/sim"],
                                                                   FLOORS["quantizers/sim/xmodel"])]
    assert _room_cycles(graph) == [["quantizers/sim", "quantizers/sim/xmodel"]]


def test_a_step_declares_every_result_it_reads():
    # a step that reads another step's saved result must go stale with it (requires/after, directly or
    # through the graph), or a re-run of that step leaves it describing the old one
    from pipeline.steps import derived
    for name in STEP_NAMES:
        with open(MODULES["pipeline.steps." + name], encoding="utf-8") as f:
            read = set(re.findall(r"(?:load_step|require)\(\"(\w+)\"", f.read()))
        assert [r for r in sorted(read) if name not in derived(r)] == [], name


def test_report_keys_of_the_steps_are_their_own():
    from pipeline.steps import ORDER
    frame = {"status", "run", "warnings", "quantizer_changes", "source", "steps", "artifacts", "versions", "summary"}
    keys = [k for s in ORDER for k in s.result.REPORT_KEYS]
    assert len(keys) == len(set(keys)) and not set(keys) & frame
