"""A fake ``pytorch_nndct`` package for tests that must not need the real one.

It imitates the behaviours the nndct adapter defends against (docs/quantizer.md): its import
strips ``--nndct_*`` flags from ``sys.argv``; its quant model rounds the input tensor in place; it
replaces ReLU6 by ReLU in the module it is given; it logs errors and returns instead of raising; it
calls ``sys.exit`` on version and config checks; ``export_xmodel`` raises without ``xir``.
Tests switch behaviours on through ``apis.BEHAVIOUR`` and read what it saw in ``apis.CALLS``.
"""
import importlib
import sys

MODULES = ("pytorch_nndct", "pytorch_nndct.apis", "pytorch_nndct.version")

FAKE_INIT = '''
import sys
SEEN_ARGV = list(sys.argv)
for _flag in [a for a in sys.argv[1:] if a.startswith("--nndct_")]:
    sys.argv.remove(_flag)
from .version import __version__
'''

FAKE_VERSION = "__version__ = '3.5.0+fake+torch0'\n"

FAKE_APIS = '''
import json, logging, os, sys
import torch

CALLS = []
BEHAVIOUR = {}
_LOG = logging.getLogger("nndct_screen")


def _error(code, msg):
    _LOG.error("\\x1b[0;31m[VAIQ_ERROR][QUANTIZER_TORCH_%s]: %s\\x1b[0m" % (code, msg))


class _QuantModel(torch.nn.Module):
    def __init__(self, module, owner):
        super().__init__()
        self.module = module
        self.owner = owner

    def forward(self, x):
        CALLS.append(("forward", x))
        self.owner.batch_sizes.append(int(x.shape[0]))
        x.copy_(torch.floor(x * 64 + 0.5) / 64)   # rounds its input in place, like fix_neuron
        if not BEHAVIOUR.get("forward_not_counted"):
            self.owner.forwards += 1
        return self.module(x)


class torch_quantizer:
    def __init__(self, quant_mode, module, input_args=None, input_kwargs=None, state_dict_file=None,
                 output_dir="quantize_result", bitwidth=None, mix_bit=False, device=torch.device("cuda"),
                 lstm=False, app_deploy="CV", qat_proc=False, custom_quant_ops=None,
                 quant_config_file=None, target=None, dynamo=False):
        CALLS.append(("init", {"quant_mode": quant_mode, "module": module, "input_args": input_args,
                               "output_dir": output_dir, "bitwidth": bitwidth, "device": device,
                               "quant_config_file": quant_config_file, "target": target}))
        if BEHAVIOUR.get("version_mismatch"):
            _error("TORCH_VERSION", "Installed pytorch version is 9.9, not consistent with pytorch version "
                   "when compiling quantizer (1.13.1)")
            sys.exit(1)
        if BEHAVIOUR.get("config_exit"):
            _error("QUANT_CONFIG", "Unsupported key 'include_cl' in quant config file")
            sys.exit(2)
        if BEHAVIOUR.get("raise_keyerror"):
            raise KeyError("target_device")
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.ReLU6):
                setattr(module, name, torch.nn.ReLU())        # CLE's ReLU6 -> ReLU rewrite
        self.name = type(module).__name__
        self.output_dir = output_dir
        os.makedirs(output_dir, exist_ok=True)
        with open(os.path.join(output_dir, self.name + ".py"), "w") as f:
            f.write("# GENETARED BY NNDCT, DO NOT EDIT!\\n")
        if quant_mode == "test" and not os.path.isfile(os.path.join(output_dir, "quant_info.json")):
            sys.exit(2)
        self.batch_sizes, self.forwards = [], 0
        self._qm = _QuantModel(module, self)

    @property
    def quant_model(self):
        return self._qm

    def export_quant_config(self):
        CALLS.append(("export_quant_config", None))
        if self.forwards == 0:
            _error("NO_FORWARD", "torch_quantizer.quant_model FORWARD function must be called before "
                   "exporting quantization result.")
            return
        folder = self.output_dir
        if not BEHAVIOUR.get("skip_quant_info"):
            with open(os.path.join(folder, "quant_info.json"), "w") as f:
                json.dump({"param": {}, "output": {self.name + "::nndct_input_0": [[8, 6]]}, "input": {},
                           "fast_finetuned": bool(getattr(self, "finetuned", False)), "bias_corrected": True, "version": "3.5.0+fake",
                           "graph_md5": "0"}, f)
        if not BEHAVIOUR.get("skip_bias_corr"):
            torch.save({}, os.path.join(folder, "bias_corr.pth"))

    def fast_finetune(self, run_fn, run_args):
        CALLS.append(("fast_finetune", None))
        self.finetuned = True
        run_fn(*run_args)     # keeps the batches (quantization off)
        run_fn(*run_args)     # its own calibration
        self.forwards = 0     # the re-calibration forwards come next
        torch.save({"module_0.weight": torch.zeros(1)}, os.path.join(self.output_dir, "param.pth"))

    def load_ft_param(self):
        CALLS.append(("load_ft_param", self.forwards))
        info = json.load(open(os.path.join(self.output_dir, "quant_info.json")))
        if not info.get("fast_finetuned"):
            _error("FAST_FINETUNE", "quant_info.json is not fast-finetuned")
            sys.exit(2)

    def _write(self, output_dir, suffix):
        if self.forwards == 0:
            _error("NO_FORWARD", "torch_quantizer.quant_model FORWARD function must be called before "
                   "exporting quantization result.")
            return
        if BEHAVIOUR.get("write_nothing"):
            return
        names = [self.name + suffix] if not BEHAVIOUR.get("two_graphs") else \\
            [self.name + "_0" + suffix, self.name + "_1" + suffix]
        for name in names:
            with open(os.path.join(output_dir, name), "wb") as f:
                f.write(b"fake" + suffix.encode())

    def export_xmodel(self, output_dir="quantize_result", deploy_check=False, dynamic_batch=False):
        CALLS.append(("export_xmodel", {"output_dir": output_dir, "batch_sizes": list(self.batch_sizes),
                                        "deploy_check": deploy_check}))
        if BEHAVIOUR.get("no_xir"):
            raise Exception("please install xir package")
        # the real quantizer records shapes on the FIRST test-mode forward and checks those
        if BEHAVIOUR.get("batch_error") or (self.batch_sizes and self.batch_sizes[0] != 1):
            _error("XMODEL_BATCHSIZE", "Batch size must be 1 when exporting xmodel.")
        if deploy_check and self.forwards and not BEHAVIOUR.get("no_dumps"):
            # the dumps before the xmodel, in <output_dir>/deploy_check_data_int/<graph name>/
            dumps = os.path.join(output_dir, "deploy_check_data_int", self.name)
            os.makedirs(dumps, exist_ok=True)
            with open(os.path.join(dumps, self.name + "__input_0.bin"), "wb") as f:
                f.write(bytes(256))
            with open(os.path.join(dumps, "shape.txt"), "w") as f:
                f.write("[1, 8, 8, 1]: %s::input_0\\n" % self.name)
        self._write(output_dir, "_int.xmodel")

    def export_onnx_model(self, output_dir="quantize_result", verbose=False, dynamic_batch=False,
                          opset_version=None, native_onnx=True, dump_layers=False, check_model=False,
                          opt_graph=False):
        CALLS.append(("export_onnx_model", {"output_dir": output_dir}))
        self._write(output_dir, "_int.onnx")

    def export_torch_script(self, output_dir="quantize_result", verbose=False):
        CALLS.append(("export_torch_script", {"output_dir": output_dir}))
        self._write(output_dir, "_int.pt")
'''




def install(folder, monkeypatch):
    """Write the fake package under ``folder`` and put it first on sys.path (undone by monkeypatch)."""
    pkg = folder / "pytorch_nndct"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_INIT)
    (pkg / "version.py").write_text(FAKE_VERSION)
    (pkg / "apis.py").write_text(FAKE_APIS)
    monkeypatch.syspath_prepend(str(folder))
    forget()
    importlib.invalidate_caches()


def forget():
    """Drop the fake (or real) modules from sys.modules."""
    for name in MODULES:
        sys.modules.pop(name, None)


def apis():
    """The fake's apis module (imports it if the adapter has not yet)."""
    return importlib.import_module("pytorch_nndct.apis")
