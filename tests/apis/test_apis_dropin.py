"""The rest of the drop-in surface: ``from pipeline.apis import torch_quantizer, dump_xmodel,
Inspector`` (the imports of real Vitis AI quantize scripts): fast finetuning misused (no data, test
mode, ``load_ft_param`` without a finetuned calibration) raises a clear QuantizationError;
``dump_xmodel`` writes the xmodel of the quantizer that ran last, as the real one does."""
import json
import os

import pytest
import torch
from torch import nn

from pipeline.apis import Inspector, dump_xmodel, torch_quantizer
from pipeline.errors import ConfigError, ExportError, QuantizationError
from pipeline.xir import reader


class _TwoIn(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x, m):
        y = torch.cat([torch.relu(self.a(x)), torch.relu(self.b(m))], dim=1)
        return torch.sigmoid(self.head(y))


def _inputs(n=2):
    g = torch.Generator().manual_seed(3)
    return torch.randn(n, 3, 8, 8, generator=g), torch.randn(n, 1, 8, 8, generator=g)


def test_inspector_writes_the_reports_of_a_two_input_model(tmp_path, capsys):
    inspection = Inspector("DPUCZDX8G_ISA1_B4096").inspect(_TwoIn(), _inputs(), device=torch.device("cpu"),
                                                          output_dir=str(tmp_path), image_format=None)
    report = json.load(open(str(tmp_path / "inspect_DPUCZDX8G_ISA1_B4096.json")))
    assert os.path.exists(str(tmp_path / "inspect_DPUCZDX8G_ISA1_B4096.txt"))
    cpu = [n.name for n in inspection.nodes if n.device == "CPU"]
    assert cpu == ["sigmoid"]
    assert "sigmoid" in capsys.readouterr().out  # verbose_level 1 lists the CPU operations
    assert report  # parsed JSON


def test_inspector_refuses_unknown_targets_and_formats(tmp_path):
    with pytest.raises(ConfigError, match="DPUCZDX8G"):
        Inspector("DPUCZDX8G_ISA1_B40960")
    with pytest.raises(ConfigError, match="image_format must be None, 'svg' or 'png', got 'jpg'"):
        Inspector("DPUCZDX8G_ISA1_B4096").inspect(_TwoIn(), _inputs(), output_dir=str(tmp_path), image_format="jpg")


def test_fast_finetune_misuse_raises_and_dump_xmodel_writes(tmp_path):
    import pipeline.apis.quantizer
    pipeline.apis.quantizer._CURRENT = None  # as in a new process
    with pytest.raises(QuantizationError, match="dump_xmodel: no quantizer has run a forward.*test mode"):
        dump_xmodel(str(tmp_path))
    model = _TwoIn()
    q = torch_quantizer("calib", model, _inputs(), output_dir=str(tmp_path), device=torch.device("cpu"))
    with pytest.raises(QuantizationError, match="fast finetune needs at least 2 batches of finetune data, got 0"):
        q.fast_finetune(lambda: None, ())  # run_fn feeds nothing
    q.quant_model(*_inputs(4))
    q.export_quant_config()
    t = torch_quantizer("test", model, _inputs(), output_dir=str(tmp_path), device=torch.device("cpu"))
    with pytest.raises(QuantizationError, match="load_ft_param: .* is not from a fast-finetuned calibration"):
        t.load_ft_param()
    with pytest.raises(QuantizationError, match="fast_finetune needs calib mode"):
        t.fast_finetune(lambda: None, ())
    y = t.quant_model(*_inputs(4))
    assert y.shape == (4, 4, 8, 8)
    with pytest.raises(ExportError, match="first forward of quant_model in test mode had batch size 4"):
        dump_xmodel(str(tmp_path / "x"))  # the two-input model's first test forward was batch 4
    t = torch_quantizer("test", model, _inputs(), output_dir=str(tmp_path), device=torch.device("cpu"))
    t.quant_model(*_inputs(1))
    assert dump_xmodel(str(tmp_path / "x")) == str(tmp_path / "x" / "_TwoIn_int.xmodel")
    data = [op for op in reader.check(reader.read_xmodel(str(tmp_path / "x" / "_TwoIn_int.xmodel"))).ops
            if op.type == "data"]
    assert sorted(op.name for op in data) == ["_TwoIn__input_0", "_TwoIn__input_1"]


@pytest.mark.parametrize("image_format", ["svg", "png"])
def test_inspector_draws_the_graph_or_says_why_not(image_format, tmp_path):
    import shutil
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Inspector("DPUCZDX8G_ISA1_B4096").inspect(_TwoIn(), _inputs(), output_dir=str(tmp_path),
                                                  verbose_level=0, image_format=image_format)
    image = tmp_path / ("inspect_DPUCZDX8G_ISA1_B4096." + image_format)
    if image_format == "svg" or shutil.which("dot"):  # the svg is drawn without graphviz (pipeline/inspect/svg.py)
        assert image.exists() and image.stat().st_size > 0
    else:
        assert not image.exists()
        assert any("needs graphviz's 'dot'" in str(w.message) for w in caught)
