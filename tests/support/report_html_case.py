"""A report.html made without running the pipeline: typed step results with known numbers, names that try
HTML injection (``HOSTILE``), a plot and a compile plan in a run folder; and a PNG reader for the tests."""
import hashlib
import os
import struct
import zlib
from typing import Any, Dict, Tuple

from pipeline.runner.report_html import render_html
from pipeline.steps.compile import CompileResult
from pipeline.steps.inspect import InspectResult
from pipeline.steps.test import TestResult

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'
SHA = "ab" * 32


def png(width: int, height: int, pixel: Any) -> bytes:
    """An RGB PNG whose pixel (x, y) is ``pixel(x, y)``, an (r, g, b) tuple."""
    rows = b"".join(b"\x00" + b"".join(bytes(pixel(x, y)) for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def png_colours(data: bytes, limit: int = 2) -> int:
    """The number of distinct pixel values of a PNG (8-bit, no palette, not interlaced), counted up to
    ``limit``: zlib and the PNG filters, no imaging library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + size]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + size
    width, height, depth, colour, _, _, interlace = header
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    assert depth == 8 and interlace == 0, "only 8-bit, non-interlaced PNGs"
    raw, stride, bpp = zlib.decompress(idat), width * channels, channels
    previous, seen = bytearray(stride), set()
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = previous[i], previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for x in range(0, stride, channels):
            seen.add(bytes(line[x:x + channels]))
            if len(seen) >= limit:
                return len(seen)
        previous = line
    return len(seen)


def sensitivity_row(i: int, node: str, float_node: str, sqnr: float) -> Dict[str, Any]:
    return {"bitwidth": 8, "cle_rescaled": False, "cle_scale": None, "clipped_fraction": 0.001 * i, "cosine": 0.99 + i / 1000,
            "elements": 100, "fix_pos": 4 + i, "float_max": 2.0, "float_min": -1.0, "float_node": float_node,
            "float_target": float_node, "graph_max": 2.0, "graph_min": -1.0, "node": node, "notes": [],
            "op": "nndct_conv2d", "range_max": 1.9, "range_min": -2.0, "shape": [8, 4, 4], "sqnr_db": sqnr}


SENSITIVITY = [("nndct_conv2d_1", "conv1", 31.25), ("nndct_conv2d_2", "layers." + HOSTILE, 12.5),
               ("nndct_conv2d_3", "conv3", 47.75)]


def make_case(work: str) -> Tuple[str, Dict[str, Any], Dict[str, Any]]:
    """Write a run folder's plot and compile plan under ``work``; return (report.html, report, results)."""
    os.makedirs(os.path.join(work, "plots"))
    os.makedirs(os.path.join(work, "compile"))
    for name in ("sensitivity", "activation_ranges"):
        with open(os.path.join(work, "plots", name + ".png"), "wb") as f:
            f.write(png(40, 20, lambda x, y: (255, 255, 255) if x < 20 else (13, 71, 161)))
    plan = "# Compile plan\n\n**The compiler did not run here.** " + HOSTILE + "\n\n```sh\nvai_c_xir -x a.xmodel\n```\n"
    with open(os.path.join(work, "compile", "compile_plan.md"), "w") as f:
        f.write(plan)
    test = TestResult(float_accuracy=0.9852, quant_accuracy=0.9778, accuracy_drop=0.0074, eval_images=540,
                      sensitivity=[sensitivity_row(i, n, f, s) for i, (n, f, s) in enumerate(SENSITIVITY)],
                      plots={"sensitivity": "plots/sensitivity.png", "activation_ranges": "plots/activation_ranges.png"})
    nodes = [{"name": "conv1", "op": "conv2d", "device": "DPU", "shape": [1, 8, 4, 4], "inputs": ["x"], "reasons": [],
              "notes": []},
             {"name": HOSTILE, "op": "sigmoid", "device": "CPU", "shape": [1, 8, 4, 4], "inputs": ["conv1"],
              "reasons": ["sigmoid can't be assigned to DPU."], "notes": []},
             {"name": "fc", "op": "dense", "device": "DPU", "shape": [1, 10], "inputs": [HOSTILE], "reasons": [],
              "notes": ["a note"]}]
    graph = {"model": "Net" + HOSTILE, "target": "DPUCZDX8G_ISA1_B4096", "summary": "DPU: 2 nodes, CPU: 1 nodes",
             "inputs": [{"name": "x", "shape": [1, 1, 8, 8]}], "outputs": ["fc"], "nodes": nodes,
             "partition": {"rule": "the rule", "caveats": ["closed-source compiler"], "line": "3 subgraphs: 2 DPU, 1 CPU",
                           "count": {"total": 3, "dpu": 2, "cpu": 1},
                           "subgraphs": [{"name": "dpu_0", "device": "DPU", "nodes": ["conv1"], "inputs": ["x"]},
                                         {"name": "cpu_0", "device": "CPU", "nodes": [HOSTILE], "inputs": ["conv1"]},
                                         {"name": "dpu_1", "device": "DPU", "nodes": ["fc"], "inputs": [HOSTILE]}],
                           "fixes": [{"node": HOSTILE, "op": "sigmoid", "device": "CPU", "subgraph": "cpu_0",
                                      "reasons": ["sigmoid can't be assigned to DPU."],
                                      "fixes": [{"message": "use nn.Hardsigmoid", "code": "nn.Hardsigmoid()",
                                                 "exact": False, "follows": None}]}]}}
    inspect = InspectResult(summary="DPU: 2 nodes, CPU: 1 nodes", files={}, changes=[], graph=graph)
    compile_ = CompileResult(compiled=None, argv=["vai_c_xir", "-x", "export/Net_int.xmodel", "-n", "digits"],
                             target="DPUCZDX8G_ISA1_B4096", reason="vai_c_xir is not on this machine",
                             plan={"plan": "compile/compile_plan.md", "script": "compile/compile.sh"},
                             next="run compile/compile.sh inside the Vitis AI image",
                             handed_on={"compile/compile_plan.md": {"bytes": len(plan),
                                                                    "sha256": hashlib.sha256(plan.encode()).hexdigest()}})
    results = {"inspect": inspect, "test": test, "compile": compile_}
    report = {"status": {"state": "ok", "steps": ["inspect", "test", "compile"]},
              "run": {"name": "digits" + HOSTILE, "config": "/configs/x.yaml", "config_sha256": "c0ffee" * 8,
                      "backend": "sim", "target": "DPUCZDX8G_ISA1_B4096"},
              "warnings": ["few eval images " + HOSTILE], "quantizer_changes": ["ReLU6 -> ReLU (" + HOSTILE + ")"],
              "source": None,
              "artifacts": [{"path": "plots/sensitivity.png", "bytes": 1234, "sha256": SHA},
                            {"path": "compile/" + HOSTILE, "bytes": 7, "sha256": "cd" * 32}],
              "versions": {"python": "3.x", "torch": "2.x"}, "support": {"kind": "proven", "text": "proven here"}}
    return render_html(report, results, work), report, results

