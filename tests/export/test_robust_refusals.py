"""Forms a tester found crashing or misadvised, each as the real quantizer handles it.

- A token block (NCHW -> NHWC permute, an op, permute back) whose output an op reads twice (``z * z``,
  ``torch.cat([z, z], 1)``, ``z + z``): the real quantizer's layout pass fails there with a bare TypeError
  (``DevGraphOptimizer.layout_tranform`` inserts one transpose per read; measured with the real quantizer on
  these three models), so the writer refuses it, naming why, and the workaround (the op before the permute
  back) is written.
- ``y[0]``, the batch dimension selected: the real quantizer writes ``nndct_select`` {dim 0, index 0}
  (measured: its xmodel equals this writer's); the inspector inspects it.
- ``y[:, None][:, 0, 3:4]``: a slice chain after an int that this writer has no form for; the refusal gives
  the two-step index, which is written.
- ``y[:, None, 2:6, ..., 0:4]``: slices split by an Ellipsis in an index with an int or None, which nndct runs
  on consecutive dims (measured: the real calibration fails at the Linear after it); refused at capture, before
  calibration, by the drop-in and the runner's calib step, with the index written out, which is written.
- Slices nndct merges into one strided slice whose dims are not consecutive (``y[:, 2:6, ..., 0:4]``,
  ``y[:, 2:6][:, 1:3]``): the real quantizer runs them on consecutive dims and computes another tensor, or
  fails (``y[:, 2:6][:, :, 1:3]``); refused before calibration with the one index that is written.
- ``nn.ReLU()(y)``: a module made inside forward() cannot be traced; the advice is where to make it.
- An internal error of a step (an exception that is no PipelineError) is one ``error:`` line from the CLI
  naming the step and that it is a bug, its traceback in a file of the run folder.
"""
import os

import pytest
import torch
from torch import nn

from pipeline.apis import Inspector, torch_quantizer
from pipeline.errors import ExportError, QuantizationError


class TokenTwice(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how
        self.c = nn.Conv2d(3, 8, 3, padding=1)
        self.c3 = nn.Conv2d(16 if how == "cat" else 8, 4, 3, padding=1)

    def forward(self, x):
        t = torch.relu(self.c(x).permute(0, 2, 3, 1))  # tokens
        if self.how == "before":  # the workaround: the op in the token layout
            return self.c3((t * t).permute(0, 3, 1, 2))
        z = t.permute(0, 3, 1, 2)
        w = z * z if self.how == "mul" else torch.cat([z, z], 1) if self.how == "cat" else z + z
        return self.c3(w)


INDEXES = {
    "batch0": lambda y: y[0],
    "mixed": lambda y: y[:, None][:, 0, 3:4],
    "mixed_steps": lambda y: y[:, None][:, 0][:, 3:4],  # the workaround the refusal gives
    "two": lambda y: y[:, 1, 2:4, 0],
    "two_steps": lambda y: y[:, 1][:, 2:4, 0],
    "none": lambda y: y[None, :, 1:2],
    "none_steps": lambda y: y[None][:, :, 1:2],
    "split": lambda y: y[:, None, 2:6, ..., 0:4],  # slices of dims 2 and 4 after the unsqueeze: not consecutive
    "split_full": lambda y: y[:, None, 2:6, :, 0:4],  # the workaround the refusal gives
    "split_select": lambda y: y[0:1, ..., 1:3, 0],  # slices of dims 0 and 2 before the select: not consecutive
    "split_select_full": lambda y: y[0:1, :, 1:3, 0],  # the workaround the refusal gives
    # pure slices, one strided slice each chain (nndct's OptPass.slice_to_strided_slice), run by the real quantizer
    # on consecutive dims from the chain's first (deephi_StridedSlice.forward)
    "ellipsis_last": lambda y: y[..., 0:4],  # dims [3]: right
    "ellipsis_two": lambda y: y[..., 1:3, 0:4],  # dims [2, 3]: right
    "ellipsis_mid": lambda y: y[:, 2:6, ..., 0:4],  # dims [0, 1, 3], run on [0, 1, 2]
    "ellipsis_mid_full": lambda y: y[:, 2:6, :, 0:4],  # the workaround the refusal gives
    "ellipsis_lead": lambda y: y[:, ..., 0:4],  # dims [0, 3], run on [0, 1]
    "twice": lambda y: y[:, 2:6][:, :, 1:3],  # dims [0, 1, 0, 1, 2]: 5 slices of a 4-D tensor
    "twice_once": lambda y: y[:, 2:6, 1:3],  # the workaround the refusal gives
    "twice_shifted": lambda y: y[:, 2:6][:, 1:3],  # dims [0, 1, 0, 1], run on [0, 1, 2, 3]
    "twice_shifted_once": lambda y: y[:, 3:5],
    "crops": lambda y: torch.cat([y[:, 2:6][:, :, 1:3], y[:, 2:6][:, :, 5:7]], 2),  # each chain merged: refused
    "crops_of_one": lambda y: _crops(y[:, 2:6]),  # the slice read twice: nndct merges neither crop into it
    "twice_right": lambda y: y[:, 2:6][:, 0],  # dims [0, 1, 0]: one strided slice, right, then the select
    "twice_noop": lambda y: y[:, :6][:],  # dims [0, 1, 0]: one strided slice, right
}


def _crops(a):
    return torch.cat([a[:, :, 1:3], a[:, :, 5:7]], 2)


class Index(nn.Module):
    def __init__(self, index):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1)
        self.index = index

    def forward(self, x):
        return INDEXES[self.index](self.c(x))


def _export(model, out):
    torch.manual_seed(0)
    q = torch_quantizer("calib", model.eval(), (torch.randn(2, 3, 8, 8),), output_dir=out)
    with torch.no_grad():
        q.quant_model(torch.randn(2, 3, 8, 8))
    q.export_quant_config()
    q = torch_quantizer("test", model.eval(), (torch.randn(1, 3, 8, 8),), output_dir=out)
    with torch.no_grad():
        q.quant_model(torch.randn(1, 3, 8, 8))
    q.export_xmodel(os.path.join(out, "x"))  # verified: the interpreter runs it against the simulation
    return os.path.join(out, "x", type(model).__name__ + "_int.xmodel")


@pytest.mark.parametrize("how", ["mul", "cat", "add"])
def test_an_op_reading_a_transposed_tensor_twice_is_refused_as_the_real_quantizer_fails(tmp_path, how):
    with pytest.raises(ExportError) as err:
        _export(TokenTwice(how), str(tmp_path))
    message = str(err.value)
    assert "2 times" in message and "not supported by the real quantizer either" in message
    assert "layout_tranform" in message and "before the permute back" in message
    assert not os.path.exists(str(tmp_path / "x" / "TokenTwice_int.xmodel"))


def test_the_op_before_the_permute_back_is_written(tmp_path):
    assert os.path.isfile(_export(TokenTwice("before"), str(tmp_path)))


def test_selecting_the_batch_dimension_is_written_as_the_real_quantizer_writes_it(tmp_path):
    from pipeline.xir.reader import read_xmodel
    path = _export(Index("batch0"), str(tmp_path))
    ops = [op for op in read_xmodel(path).op_node if op.op_type == "nndct_select"]
    assert len(ops) == 1
    attrs = {k: v.int32_value for k, v in ops[0].op_attr.items() if k in ("dim", "index")}
    assert attrs == {"dim": 0, "index": 0}
    Inspector("DPUCZDX8G_ISA1_B4096").inspect(Index("batch0").eval(), (torch.randn(1, 3, 8, 8),),
                                              output_dir=str(tmp_path / "insp"), verbose_level=0, image_format=None)
    assert os.listdir(str(tmp_path / "insp"))


@pytest.mark.parametrize("index", ["mixed", "two", "none", "mixed_steps", "two_steps", "none_steps"])
def test_a_slice_after_an_int_or_none_is_written_as_the_real_quantizer_writes_it(tmp_path, index):
    """A select or unsqueeze, then one strided slice of the dimensions after it (tests/data/refused_real:
    int_slice_index, none_int_slice_index, int_slice_int_index, none_slice_index hold the files); verified: the
    interpreter runs the file against the simulation. The inspector and the ONNX export take it too."""
    from pipeline.xir.reader import read_xmodel
    path = _export(Index(index), str(tmp_path))
    types = [op.op_type for op in read_xmodel(path).op_node]
    assert "strided_slice" in types and ("nndct_select" in types or "reshape" in types)
    Inspector("DPUCZDX8G_ISA1_B4096").inspect(Index(index).eval(), (torch.randn(1, 3, 8, 8),),
                                              output_dir=str(tmp_path / "insp"), verbose_level=0, image_format=None)
    assert os.listdir(str(tmp_path / "insp"))


@pytest.mark.parametrize("index, dims, effect, instead", [
    ("split", "[2, 4]", "it runs them on dims [2, 3]: its calibration and test mode compute another tensor, "
                        "silently (shape (2, 1, 4, 4, 8) for torch's (2, 1, 4, 8, 4) on the example); a layer after "
                        "it that needs torch's shape fails in its calibration",
     "x[:, None, 2:6, :, 0:4] for x[:, None, 2:6, ..., 0:4]"),
    ("split_select", "[0, 2]", "it runs them on dims [0, 1]", "x[0:1, :, 1:3, 0] for x[0:1, ..., 1:3, 0]"),
])
def test_a_slice_chain_split_by_an_ellipsis_with_an_int_or_none_is_refused_before_calibration(
        tmp_path, index, dims, effect, instead):
    """torch.jit records the chain's slices on dims that are not consecutive, which nndct merges into one strided
    slice run on consecutive dims (measured: tests/data/refused_real/ellipsis_split_index, the real calibration
    fails at the Linear after it); refused where torch_quantizer captures the model, before any calibration
    forward, nothing written; the workaround is written."""
    out = str(tmp_path / "refused")
    with pytest.raises(QuantizationError) as err:
        torch_quantizer("calib", Index(index).eval(), (torch.randn(2, 3, 8, 8),), output_dir=out)
    message = str(err.value)
    assert "(slices of dims %s, which nndct's parser merges into one strided slice" % dims in message
    assert "not supported by the real quantizer either" in message and effect in message
    assert ("Write the dimensions the Ellipsis stands for as full slices: %s, which is written and gives the same "
            "values" % instead) in message
    assert not os.path.exists(out) or not os.listdir(out)
    assert os.path.isfile(_export(Index(index + "_full"), str(tmp_path / "full")))


def test_the_runner_refuses_the_split_chain_in_its_calib_step_before_any_forward(tmp_path, monkeypatch):
    """The runner's calib step: the capture refuses the model before any calibration forward, and the
    quantize_result folder holds no quant_info.json."""
    import pipeline
    from pipeline.quantizers.sim import calib
    from tests.support import make_case
    drawn = []
    step = calib.Calibrator.step
    monkeypatch.setattr(calib.Calibrator, "step", lambda self, *xs: drawn.append(1) or step(self, *xs))
    cfg, _ = make_case(tmp_path, model={"zoo": None, "factory": "tests.support.split_chain_model:split_chain_cnn",
                                        "train": {"epochs": 1}},
                       quantizer={"require_float_above_chance": False})
    pipeline.run(cfg, steps=["train"])
    with pytest.raises(QuantizationError, match=r"x\[:, None, 2:6, :, 0:4\] for x\[:, None, 2:6, \.\.\., 0:4\]"):
        pipeline.run(cfg, steps=["calib"])
    assert drawn == []
    assert not (tmp_path / "run" / "quantize_result" / "quant_info.json").exists()


@pytest.mark.parametrize("index", ["ellipsis_last", "ellipsis_two", "ellipsis_mid_full", "twice_once",
                                   "twice_shifted_once", "crops_of_one", "twice_right", "twice_noop"])
def test_slices_the_real_quantizer_runs_as_torch_does_are_written(tmp_path, index):
    """One strided slice of consecutive dims per chain, or of dims the real quantizer gets right (two getitems
    merged into one: measured, the real file equals this writer's; tests/data/refused_real: ellipsis_slices_index,
    slice_read_twice_index hold real files); verified: the interpreter runs the file against the simulation. The
    inspector takes it too."""
    from pipeline.xir.reader import read_xmodel
    path = _export(Index(index), str(tmp_path))
    types = [op.op_type for op in read_xmodel(path).op_node]
    assert types.count("strided_slice") == (3 if index == "crops_of_one" else 1)
    Inspector("DPUCZDX8G_ISA1_B4096").inspect(Index(index).eval(), (torch.randn(1, 3, 8, 8),),
                                              output_dir=str(tmp_path / "insp"), verbose_level=0, image_format=None)
    assert os.listdir(str(tmp_path / "insp"))


@pytest.mark.parametrize("index, effect, instead", [
    ("ellipsis_mid", "it runs them on dims [0, 1, 2]: its calibration and test mode compute another tensor, "
                     "silently (shape (2, 4, 4, 8) for torch's (2, 4, 8, 4) on the example)",
     "Write the dimensions the Ellipsis stands for as full slices: x[:, 2:6, :, 0:4] for x[:, 2:6, ..., 0:4]"),
    ("ellipsis_lead", "it runs them on dims [0, 1]", "x[:, :, :, 0:4] for x[:, ..., 0:4]"),
    ("twice", "5 slices from dimension 0 of a tensor of 4 dimensions: its calibration fails (IndexError: too many "
              "indices)", "Index once, each dimension once: x[:, 2:6, 1:3] for x[:, 2:6][:, :, 1:3]"),
    ("twice_shifted", "it runs them on dims [0, 1, 2, 3]", "x[:, 3:5] for x[:, 2:6][:, 1:3]"),
    ("crops", "5 slices", "x[:, 2:6, 1:3] for x[:, 2:6][:, :, 1:3]"),
])
def test_slices_the_real_quantizer_runs_on_other_dims_are_refused_before_calibration(tmp_path, index, effect,
                                                                                      instead):
    """nndct merges a chain of slices (across getitems) into one strided slice whose forward slices consecutive
    dims from the chain's first (measured with the real quantizer: these calibrate another tensor silently, or
    fail with IndexError); refused at capture, before calibration, with the one index that is written. The
    inspector's as-written view still inspects the model."""
    with pytest.raises(QuantizationError) as err:
        _export(Index(index), str(tmp_path))
    message = str(err.value)
    assert "not supported by the real quantizer either" in message and "OptPass.slice_to_strided_slice" in message
    assert effect in message and instead + ", which is written and gives the same values" in message
    assert not os.path.exists(str(tmp_path / "quant_info.json"))
    # the inspector's as-written view takes the model as written
    Inspector("DPUCZDX8G_ISA1_B4096").inspect(Index(index).eval(), (torch.randn(1, 3, 8, 8),),
                                              output_dir=str(tmp_path / "insp"), verbose_level=0, image_format=None)
    assert os.listdir(str(tmp_path / "insp"))


def test_a_module_made_in_forward_gets_the_advice_to_make_it_in_init(tmp_path):
    class Inline(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            return nn.ReLU()(self.c(x))
    with pytest.raises(QuantizationError) as err:
        torch_quantizer("calib", Inline().eval(), (torch.randn(1, 3, 8, 8),), output_dir=str(tmp_path))
    message = str(err.value)
    assert "create it in __init__" in message and "F.relu" in message
    assert "control flow" not in message


def test_an_internal_error_of_a_step_is_one_line_naming_the_step_and_a_bug(tmp_path, monkeypatch, capsys):
    from pipeline.cli import main
    from pipeline.steps import model as step_model
    from tests.support import make_case
    config, _ = make_case(tmp_path)

    def broken(*args):  # a bug inside the train step
        raise TypeError("list indices must be integers or slices, not NoneType")
    monkeypatch.setattr(step_model, "check_labels", broken)
    assert main(["run", config, "--steps", "train"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "step train stopped on an internal error (TypeError: list indices" in lines[0]
    assert "this is a bug of the pipeline, please report it" in lines[0]
    where = tmp_path / "run" / "steps" / "train.internal_error.txt"
    assert str(where) in lines[0] and "Traceback" in where.read_text()
    monkeypatch.undo()  # the bug fixed: the step runs again and its old traceback goes
    assert main(["run", config, "--steps", "train"]) == 0
    assert not where.exists() and (tmp_path / "run" / "steps" / "train.json").is_file()


def test_a_model_returning_a_dict_is_told_to_return_a_tuple_by_both_exports(tmp_path):
    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.fc = nn.Conv2d(3, 4, 3, padding=1), nn.Linear(4, 2)

        def forward(self, x):
            y = self.c(x)
            return {"logits": self.fc(y.mean((2, 3))), "features": y}
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    q = torch_quantizer("calib", Heads().eval(), (x,), output_dir=str(tmp_path))
    with torch.no_grad():
        q.quant_model(x)
    q.export_quant_config()
    q = torch_quantizer("test", Heads().eval(), (x[:1],), output_dir=str(tmp_path))
    with torch.no_grad():
        q.quant_model(x[:1])
    with pytest.raises(ExportError) as onnx_err:
        q.export_onnx_model(output_dir=str(tmp_path))
    assert "Return the tensors themselves (a tuple instead of a dict)" in str(onnx_err.value)
    assert "drop onnx_" not in str(onnx_err.value)  # dropping ONNX would only meet the xmodel's refusal
    with pytest.raises(ExportError, match="the model returns a dict; the xmodel carries a tensor or a flat tuple"):
        q.export_xmodel(output_dir=str(tmp_path))
