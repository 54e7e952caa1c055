"""A fake ``vai_c_xir`` for the compile tests: ``FAKE`` (a script template, ``{python}`` the interpreter)
records its argv and behaves as ``FAKE_VAI_C_MODE`` says; ``B4096_ARCH``, an arch.json of DPUCZDX8G_ISA1_B4096;
``install`` puts the fake first on PATH."""
import json
import os
import stat
import sys

B4096_ARCH = {"fingerprint": "0x101000056010407"}

FAKE = r'''#!{python}
"""Fake vai_c_xir: records its argv, then behaves as FAKE_VAI_C_MODE says."""
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_VAI_C_RECORD"], "w") as f:
    json.dump(args, f)
opts = dict(zip(args[0::2], args[1::2]))
mode = os.environ.get("FAKE_VAI_C_MODE", "ok")
print("[UNILOG][INFO] Compile mode: dpu")
if mode == "ok":
    out = opts["-o"]
    with open(os.path.join(out, opts["-n"] + ".xmodel"), "wb") as f:
        f.write(b"compiled:" + open(opts["-x"], "rb").read())
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


def install(tmp_path, monkeypatch):
    """Put the fake ``vai_c_xir`` first on PATH (in ``tmp_path/bin``), have it record its argv in
    ``tmp_path/argv.json`` and write ``tmp_path/arch.json`` (``B4096_ARCH``). Returns
    ``(path of argv.json, path of arch.json)``, as strings."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "vai_c_xir"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("FAKE_VAI_C_RECORD", str(tmp_path / "argv.json"))
    (tmp_path / "arch.json").write_text(json.dumps(B4096_ARCH))
    return str(tmp_path / "argv.json"), str(tmp_path / "arch.json")
