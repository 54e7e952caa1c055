"""Read a folder of layer dumps for ``python -m pipeline compare`` (docs/xmodel.md#board-dumps).

Layouts taken (each detected from the files, never from the folder's name):

- **deploy-check** (``export_xmodel(deploy_check=True)``, the real quantizer's or this project's, or
  ``xmodel run --dump``): ``<name>.bin`` raw float32, ``<name>_fix.bin`` raw int8 codes,
  ``<node>_pre_fix_i<k>.bin`` input codes, ``shape.txt`` (``<dims>: <node name>`` per node, NHWC). The
  folder itself, its ``deploy_check_data_int`` parent or the export folder above that (one model).
- **VART dump** (``XLNX_ENABLE_DUMP=1``, ``vart/dpu-runner/src/dpu_runner_base_imp.cpp``):
  ``dump/<subgraph>/{input,internal,output}/<engine>.<tensor>.bin``, raw int8 codes of the DPU's
  tensors (the compiled xmodel's tensor names: ``<producer>_fix``), without strides.
- **xdputil run** (``xdputil_component/run.py``): ``<batch>.<tensor>.bin`` in the working folder, the
  output tensors' codes.

A tensor is named by its file stem; ``key`` strips ``_fix`` so that a node's float file and its codes
meet: a node ``X`` has ``floats[X]`` (``X.bin``) and ``codes[X]`` (``X_fix.bin``, or VART's ``X_fix``).
"""
import ast
import os
import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from pipeline.errors import PipelineError

SHAPE_FILE = "shape.txt"
DEPLOY_FOLDER = "deploy_check_data_int"
_VART_NAME = re.compile(r"^(\d+)\.(.+)\.bin$")
_NOT_NAME = re.compile(r"[^0-9A-Za-z]")
MAX_FILES = 100000


class CompareError(PipelineError):
    """A folder ``compare`` cannot use: missing, empty, not a dump, another model's, wrong sizes. The
    message says what came in, what was expected and what to do."""


def stem(name: str) -> str:
    """A tensor name as the dumps spell it: every character outside ``[0-9A-Za-z]`` as ``_``
    (nndct's ``DeployChecker``; VART keeps ``_`` too, so both agree)."""
    return _NOT_NAME.sub("_", name)


def node_key(name: str) -> Tuple[str, bool]:
    """``(node, is_codes)`` of a file stem: ``X_fix`` -> (X, True), ``X_pre_fix_i0`` -> itself, codes."""
    if re.search(r"_pre_fix_i\d+$", name):
        return name, True
    if name.endswith("_fix"):
        return name[:-len("_fix")], True
    return name, False


class DumpSet(object):
    """The tensors of one folder.

    Attributes:
        folder: the folder read; layout: "deploy-check", "vart" or "xdputil"; full: True for a
            deploy-check folder (every tensor of the graph; a missing one is a fault), False for a
            board's dump (the DPU's tensors only); codes, floats: node -> path of its raw file;
            order: nodes in shape.txt order; shapes: node -> dims (shape.txt); notes: what was skipped.
    """

    def __init__(self, folder: str, layout: str) -> None:
        self.folder, self.layout = folder, layout
        self.full = layout == "deploy-check"
        self.codes = {}  # type: Dict[str, str]
        self.floats = {}  # type: Dict[str, str]
        self.order = []  # type: List[str]
        self.shapes = {}  # type: Dict[str, List[int]]
        self.notes = []  # type: List[str]

    def nodes(self) -> List[str]:
        """Every node with a file, shape.txt's order first."""
        seen = list(self.order)
        known = set(seen)
        for name in sorted(set(self.codes) | set(self.floats)):
            if name not in known:
                seen.append(name)
        return [n for n in seen if n in self.codes or n in self.floats]

    def read(self, node: str, codes: bool) -> np.ndarray:
        """The raw values of a node's file: int8 codes (int16 when the file holds 2 bytes per element of
        its shape) as int32, or float32."""
        path = (self.codes if codes else self.floats)[node]
        raw = np.fromfile(path, dtype=np.uint8)
        if not codes:
            if raw.size % 4:
                raise CompareError("%s: %d bytes, not a float32 file (a multiple of 4 bytes expected): a truncated "
                                   "or damaged copy; copy the dumps again" % (path, raw.size))
            return raw.view("<f4").astype(np.float32)
        shape = self.shapes.get(node)
        if shape is not None and raw.size == 2 * int(np.prod(shape)) and raw.size:
            return raw.view("<i2").astype(np.int32)
        return raw.view(np.int8).astype(np.int32)


def _parse_shapes(path: str, dump: DumpSet) -> None:
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        raise CompareError("%s: cannot be read (%s)" % (path, e.strerror or e)) from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        dims, sep, name = line.partition("]: ")
        try:
            shape = [int(d) for d in ast.literal_eval(dims + "]")] if sep else None
        except (ValueError, SyntaxError, TypeError):
            shape = None
        if shape is None:
            raise CompareError("%s line %d: %r is not '<shape>: <node name>' as the deploy-check dumps write it; "
                               "the folder's shape.txt is damaged: make the dumps again" % (path, number, line[:80]))
        key = stem(name.strip())
        if key not in dump.shapes:
            dump.order.append(key)
        dump.shapes[key] = shape


def _deploy_folder(folder: str) -> Optional[str]:
    """The deploy-check folder at or below ``folder`` (itself, ``<m>/``, ``deploy_check_data_int/<m>/``)."""
    if os.path.isfile(os.path.join(folder, SHAPE_FILE)):
        return folder
    for base in (os.path.join(folder, DEPLOY_FOLDER), folder):
        if not os.path.isdir(base):
            continue
        found = sorted(os.path.join(base, d) for d in os.listdir(base)
                       if os.path.isfile(os.path.join(base, d, SHAPE_FILE)))
        if len(found) > 1:
            raise CompareError("%s holds the dumps of %d graphs (%s); give the folder of one of them"
                               % (folder, len(found), ", ".join(os.path.basename(f) for f in found)))
        if found:
            return found[0]
    return None


def _walk_bins(folder: str) -> List[str]:
    paths = []  # type: List[str]
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        paths += [os.path.join(root, f) for f in sorted(files) if f.endswith(".bin")]
        if len(paths) > MAX_FILES:
            raise CompareError("%s: more than %d .bin files; give the dump folder itself" % (folder, MAX_FILES))
    return paths


def load(folder: str, role: str) -> DumpSet:
    """Read ``folder`` (``role``: "REFERENCE" or "BOARD", for messages) in whichever layout it has.

    Raises:
        CompareError: no such folder, a file, nothing readable as dumps, several graphs' dumps.
    """
    to_do = ("give a deploy-check folder (export_xmodel(deploy_check=True)'s deploy_check_data_int/<Model>, or "
             "python -m pipeline xmodel run FILE --input X.npy --dump DIR)" if role == "REFERENCE" else
             "give the board's dump folder: the 'dump' folder VART writes with XLNX_ENABLE_DUMP=1, the folder "
             "xdputil run wrote its <batch>.<tensor>.bin outputs in, or a deploy-check folder")
    if not os.path.exists(folder):
        raise CompareError("%s %s: no such folder; %s" % (role, folder, to_do))
    if not os.path.isdir(folder):
        raise CompareError("%s %s: a file, not a folder; %s" % (role, folder, to_do))
    deploy = _deploy_folder(folder)
    if deploy is not None:
        dump = DumpSet(deploy, "deploy-check")
        _parse_shapes(os.path.join(deploy, SHAPE_FILE), dump)
        for name in sorted(os.listdir(deploy)):
            path = os.path.join(deploy, name)
            if name.endswith(".bin") and os.path.isfile(path):
                node, is_codes = node_key(name[:-4])
                (dump.codes if is_codes else dump.floats)[node] = path
        if not dump.codes and not dump.floats:
            raise CompareError("%s %s: shape.txt but no .bin file; the dumps are incomplete: make them again; %s"
                               % (role, deploy, to_do))
        return dump
    bins = _walk_bins(folder)
    vart = [(p, _VART_NAME.match(os.path.basename(p))) for p in bins]
    vart = [(p, m) for p, m in vart if m]
    if not vart:
        what = "empty" if not os.listdir(folder) else (
            "%d .bin files without shape.txt and not named <engine>.<tensor>.bin" % len(bins) if bins
            else "no .bin file")
        raise CompareError("%s %s: %s: not a dump folder; %s" % (role, folder, what, to_do))
    layout = "vart" if any(os.path.basename(os.path.dirname(p)) in ("input", "internal", "output") for p, _ in vart) \
        else "xdputil"
    dump = DumpSet(folder, layout)
    engines = set()
    for path, m in vart:
        engines.add(int(m.group(1)))
        if int(m.group(1)) != 0:
            continue
        node = node_key(stem(m.group(2)))[0]
        if node in dump.codes:
            if os.path.getsize(dump.codes[node]) == os.path.getsize(path):
                continue  # a subgraph's output is the next one's input: the same tensor twice
            dump.notes.append("%s and %s hold tensor %s with different sizes; the first is compared"
                              % (dump.codes[node], path, node))
            continue
        dump.codes[node] = path
    if engines - {0}:
        dump.notes.append("batch/engine files %s ignored: the reference is batch 1, so engine 0 is compared"
                          % sorted(engines - {0}))
    return dump
