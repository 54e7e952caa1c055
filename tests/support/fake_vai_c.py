"""A fake ``vai_c_xir`` for the compile tests: ``FAKE`` (a script template, ``{python}`` the interpreter)
records its argv and behaves as ``FAKE_VAI_C_MODE`` says; ``B4096_ARCH``, an arch.json of DPUCZDX8G_ISA1_B4096;
``install`` puts the fake first on PATH; ``compiled_xmodel`` is the compiled model it writes (an XIR graph
with one DPU subgraph, the input's bytes as its machine code)."""
import json
import os
import stat
import sys

from tests.support import REPO

B4096_ARCH = {"fingerprint": "0x101000056010407"}

FAKE = r'''#!{python}
"""Fake vai_c_xir: records its argv, then behaves as FAKE_VAI_C_MODE says."""
import json, os, sys, time
sys.path.insert(0, {repo!r})
from tests.support.fake_vai_c import compiled_xmodel
args = sys.argv[1:]
with open(os.environ["FAKE_VAI_C_RECORD"], "w") as f:
    json.dump(args, f)
opts = dict(zip(args[0::2], args[1::2]))
mode = os.environ.get("FAKE_VAI_C_MODE", "ok")
print("[UNILOG][INFO] Compile mode: dpu")
if mode in ("ok", "empty", "garbage", "cpu_only", "other_dpu"):
    out = opts["-o"]
    arch = json.load(open(opts["-a"]))
    fingerprint = int(arch["fingerprint"], 16) if "fingerprint" in arch else None
    data = compiled_xmodel(open(opts["-x"], "rb").read(), fingerprint)
    data = {{"empty": b"", "garbage": b"garbage\n", "cpu_only": compiled_xmodel(b"", fingerprint, device="CPU"),
             "other_dpu": compiled_xmodel(b"", (fingerprint or 0) + 1)}}.get(mode, data)
    with open(os.path.join(out, opts["-n"] + ".xmodel"), "wb") as f:
        f.write(data)
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump({{"target": json.load(open(opts["-a"]))}}, f)
    sys.exit(0)
if mode == "fail":
    for i in range(30):
        sys.stderr.write("error line %d\n" % i)
    sys.exit(3)
if mode == "sleep":
    time.sleep(30)
sys.stderr.write("[UNILOG][FATAL] aborted\n")
sys.exit(0)
'''


def compiled_xmodel(source: bytes, fingerprint=None, device: str = "DPU") -> bytes:
    """A compiled xmodel as ``vai_c_xir`` lays it out, reduced: graph ``compiled`` with one op, its root
    subgraph holding one child subgraph on ``device`` with ``dpu_fingerprint`` (none when None) and
    ``source`` as its ``mc_code``. The same arguments give the same bytes."""
    from pipeline.xir import schema
    msg = schema.Graph()
    msg.graph_name = "compiled"
    op = msg.op_node.add()
    op.op_name, op.op_type = "input", "data-fix"
    msg.subg_root.subgraph_name = "root"
    msg.subg_root.op_name.append("input")
    child = msg.subg_root.subg_child.add()
    child.subgraph_name = "subgraph_input"
    child.op_name.append("input")
    child.subg_attr["device"].CopyFrom(schema.attr_value("string", device))
    if fingerprint is not None:
        child.subg_attr["dpu_fingerprint"].CopyFrom(schema.attr_value("uint64", fingerprint))
    child.subg_attr["mc_code"].CopyFrom(schema.attr_value("bytes", source))
    return msg.SerializeToString(deterministic=True)


def install(tmp_path, monkeypatch):
    """Put the fake ``vai_c_xir`` first on PATH (in ``tmp_path/bin``), have it record its argv in
    ``tmp_path/argv.json`` and write ``tmp_path/arch.json`` (``B4096_ARCH``). Returns
    ``(path of argv.json, path of arch.json)``, as strings."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "vai_c_xir"
    exe.write_text(FAKE.format(python=sys.executable, repo=REPO))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("FAKE_VAI_C_RECORD", str(tmp_path / "argv.json"))
    (tmp_path / "arch.json").write_text(json.dumps(B4096_ARCH))
    return str(tmp_path / "argv.json"), str(tmp_path / "arch.json")
