"""The layout's rules, checked on the source (docs/architecture.md, "Rules the code keeps"): no import
cycle between pipeline's modules, no module over 400 lines, the driver floor and the data room
name no backend, and only ``pipeline/steps/`` names a step."""
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


def _imported(name, node):
    """The pipeline modules an import statement names (relative imports resolved)."""
    package = name if MODULES[name].endswith("__init__.py") else name.rpartition(".")[0]
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
        found.append(sub if sub in MODULES else target)
    return found


def _module_level_imports(name):
    """The pipeline modules ``name`` imports when it is imported (not the ones imported inside functions,
    nor under ``if TYPE_CHECKING:``)."""
    out = set()
    for node in _tree(name).body:
        stack = [node]
        while stack:  # module-level statements, including those under if/try
            n = stack.pop()
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                out.update(m for m in _imported(name, n) if m in MODULES and m != name)
            elif isinstance(n, ast.If) and "TYPE_CHECKING" in ast.dump(n.test):
                stack.extend(n.orelse)  # imports for annotations only: never run
            elif not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.extend(ast.iter_child_nodes(n))
    return out


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
    graph = {}
    for name in MODULES:
        # importing a.b.c runs a/__init__ and a/b/__init__ first: those edges are Python's, not the module's
        graph[name] = {m for m in _module_level_imports(name) if not name.startswith(m + ".")}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


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

def _room(name):
    """A module's room: the package under pipeline/ it is in, or the module itself."""
    parts = name.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


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


def _room_imports():
    """``{(room, imported room): [module, ...]}`` over every import of every module, also inside functions."""
    out = {}
    for name in MODULES:
        for target in _all_imports(name):
            if target in MODULES and _room(target) != _room(name):
                out.setdefault((_room(name), _room(target)), []).append(name)
    return out


def test_every_room_is_on_a_floor_of_the_architecture_doc():
    rooms = {_room(m) for m in MODULES}
    assert sorted(rooms - set(FLOORS)) == [] and sorted(set(FLOORS) - rooms) == []


def test_no_module_imports_from_a_floor_above_its_own():
    upward = sorted("%s (floor %d) imports %s (floor %d): %s" % (a, FLOORS[a], b, FLOORS[b], sorted(set(ms)))
                    for (a, b), ms in _room_imports().items() if FLOORS[b] > FLOORS[a])
    assert upward == []


def test_no_two_rooms_import_each_other():
    graph = {}
    for a, b in _room_imports():
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    assert _cycles(graph) == []


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
