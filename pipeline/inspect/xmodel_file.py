"""Any path given as an ``.xmodel``: read it, tell other formats apart, and parse it, with one clear
message for each way it can fail (``python -m pipeline xmodel ...``, docs/xmodel.md#check-and-run-any-xmodel).

:func:`load` returns the bytes and the parsed ``serial_v2.Graph`` message, or raises
:class:`XmodelFileError` whose message is one paragraph: what was expected, what came in, what to do.
It never lets a parser's own exception through: a truncated file, random bytes, a flipped byte, an
empty file, a folder, a missing path, an ONNX or a torch file each get their own sentence.
"""
import os
from typing import Any, Optional, Tuple

from pipeline.errors import PipelineError
from pipeline.xir import schema

EXPECTED = ("an XIR .xmodel: one serialized serial_v2.Graph protobuf message, the <Model>_int.xmodel that the "
            "quantizer's export_xmodel() writes")
TO_DO = ("give the quantized xmodel itself (export it again with quantizer.export_xmodel() in test mode, or "
         "'python -m pipeline export CONFIG': it lies under the run folder's export/), and copy it as a binary "
         "file")
MAX_BYTES = 2 ** 31 - 1  # protobuf's limit for one message


class XmodelFileError(PipelineError):
    """The path is not a readable, parsable XIR graph. The message is one paragraph naming the path,
    what was expected, what came in, and what to do."""


class CompiledXmodelError(XmodelFileError):
    """The path is a compiled xmodel (``vai_c_xir``'s output: DPU/CPU subgraphs, ``*-fix`` ops), not the
    quantized one these commands read; ``what`` says which of the two it shows."""

    def __init__(self, path: str, what: str) -> None:
        self.path, self.what = path, what
        super().__init__("%s is a compiled xmodel (vai_c_xir's output: %s), not the quantized xmodel these commands "
                         "read (the compiler's input, the <Model>_int.xmodel); %s" % (path, what, COMPILED_TO_DO))


COMPILED_TO_DO = ("give the <Model>_int.xmodel it was compiled from (the run folder's export/), and inspect the "
                  "compiled file with xdputil (xdputil xmodel FILE) or xir in the Vitis AI image")


def _fail(path: str, got: str, to_do: str = TO_DO) -> XmodelFileError:
    return XmodelFileError("%s: expected %s; got %s. To do: %s." % (path, EXPECTED, got, to_do))


_MAGICS = (  # (prefix, what it is, what to do instead)
    (b"PK\x03\x04", "a zip archive (torch.save and TorchScript .pt/.pth files are zip archives)",
     "a .pt file is a PyTorch model or state dict, not a quantized graph: quantize and export it first "
     "(docs/quantizer.md), then give the <Model>_int.xmodel"),
    (b"\x80", "a Python pickle (a legacy torch.save .pt/.pth file)",
     "quantize and export the model first (docs/quantizer.md), then give the <Model>_int.xmodel"),
    (b"\x93NUMPY", "a NumPy .npy array", "give an .npy file to 'xmodel run ... --input', and the xmodel as FILE"),
    (b"\x89HDF", "an HDF5 file (e.g. a Keras model)", TO_DO),
    (b"\x1f\x8b", "gzip-compressed data", "decompress it first, if it holds an xmodel"),
    (b"\x7fELF", "an executable (ELF)", TO_DO),
)


def _onnx_like(data: bytes) -> bool:
    """True for bytes that start like an ONNX ModelProto: field 1 (ir_version, a small varint), then
    a producer name, domain, version, graph or opset import (fields 2-8), or an ONNX word early on."""
    if len(data) < 4 or data[0] != 0x08 or data[1] > 0x7f:
        return False
    head = data[:256]
    return data[2] in (0x12, 0x1a, 0x22, 0x28, 0x32, 0x3a, 0x42) or any(
        word in head for word in (b"pytorch", b"onnx", b"tf2onnx", b"skl2onnx"))


def sniff(data: bytes) -> Optional[Tuple[str, str]]:
    """What ``data`` is when it is a known format other than an xmodel: ``(what, to do)``, else None."""
    for magic, what, to_do in _MAGICS:
        if data.startswith(magic):
            return what, to_do
    if _onnx_like(data):
        return ("an ONNX model (an onnx ModelProto: ir_version, producer, graph)",
                "this command reads XIR xmodels; check an ONNX file with onnx.checker and run it with "
                "ONNX Runtime, or give the <Model>_int.xmodel exported next to it")
    stripped = data[:512].lstrip()
    if stripped[:1] in (b"{", b"[") or stripped[:5] in (b"<?xml", b"<html"):
        return "a text file (JSON, XML or HTML), not binary protobuf", TO_DO
    return None


def read_bytes(path: str) -> bytes:
    """The bytes of the file at ``path``.

    Raises:
        XmodelFileError: the path does not exist, is a folder or not a regular file, is empty, is
            larger than a protobuf message can be (2 GiB), or cannot be read (permissions).
    """
    if not os.path.exists(path):
        folder = os.path.dirname(path) or "."
        return_to = ("check the path" + ("" if os.path.isdir(folder) else " (its folder %s does not exist either)"
                                         % folder))
        raise _fail(path, "a path that does not exist", return_to)
    if os.path.isdir(path):
        inside = []
        try:
            inside = sorted(n for n in os.listdir(path) if n.endswith(".xmodel"))
        except OSError:
            pass
        hint = ("give the file itself, e.g. %s" % os.path.join(path, inside[0]) if inside
                else "give the file itself, not its folder (no .xmodel lies directly in it)")
        raise _fail(path, "a folder", hint)
    if not os.path.isfile(path):
        raise _fail(path, "something that is not a regular file (a device, a pipe or a socket)", "give a file")
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise _fail(path, "a file of %d bytes, larger than one protobuf message can be (2 GiB)" % size)
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise _fail(path, "a file that cannot be read (%s)" % (e.strerror or e), "check its permissions") from None


def load(path: str) -> Tuple[bytes, Any]:
    """Read and parse ``path`` as an XIR graph.

    Returns:
        ``(data, msg)``: the file's bytes and its ``serial_v2.Graph`` message (at least one op).

    Raises:
        XmodelFileError: see :func:`read_bytes`; an empty file; another known format (ONNX, a torch
            .pt/.pth zip or pickle, .npy, HDF5, gzip, text); bytes protobuf cannot parse as a graph
            (truncated, damaged, random); a parsed message without a single op; a compiled xmodel
            (vai_c_xir's output, with DPU subgraphs and ``*-fix`` ops), which this command does not read.
    """
    data = read_bytes(path)
    if not data:
        raise _fail(path, "an empty file (0 bytes)", "the export or the copy was interrupted: " + TO_DO)
    other = sniff(data)
    if other is not None:
        raise _fail(path, other[0], other[1])
    try:
        msg = schema.parse_graph(data)
    except Exception as e:  # any parser failure (DecodeError, RecursionError, ...) is a damaged or foreign file
        raise _fail(path, "%d bytes that do not parse as a serial_v2.Graph message (%s: %s): the file is "
                    "truncated, damaged or of another format" % (len(data), type(e).__name__, str(e)[:200]),
                    "a truncated or damaged copy cannot be repaired: " + TO_DO) from None
    if not msg.op_node:
        raise _fail(path, "%d bytes that parse as protobuf but hold no op (a graph lists its ops in field 5): "
                    "random bytes or another protobuf format" % len(data))
    compiled = sorted({node.op_type for node in msg.op_node if node.op_type.endswith("-fix")})
    if compiled or len(msg.subg_root.subg_child):
        raise CompiledXmodelError(path, "ops of types %s" % ", ".join(compiled[:5]) if compiled else
                                  "DPU/CPU subgraphs")
    return data, msg
