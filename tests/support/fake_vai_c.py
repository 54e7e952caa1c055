"""A fake ``vai_c_xir`` for the compile tests: ``FAKE`` (a script template, ``{python}`` the interpreter)
records its argv and behaves as ``FAKE_VAI_C_MODE`` says; ``B4096_ARCH``, an arch.json of DPUCZDX8G_ISA1_B4096."""

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
