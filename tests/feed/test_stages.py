"""Stage contract tests, run over every registered stage, and the Compose driver's verification."""
import dataclasses

import numpy as np
import pytest
import torch

from pipeline.boundary import QuantizerBoundary
from pipeline.errors import ConfigError, StageError
from pipeline.stages import STAGES, Compose, Stage, build_stage, build_stages
from pipeline.ledger import Ledger
from pipeline.tensors import is_view_of


def _values(shape):
    """uint8 values with no two neighbours equal along any axis (so a wrong index shows)."""
    return (np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) * 37 % 251).astype(np.uint8)


def _nchw_strided(arr):
    """The same logical NCHW values on NHWC memory (a permuted, non-contiguous torch view)."""
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(0, 2, 3, 1))).permute(0, 3, 1, 2)


# name -> (spec, input shape, expected values from numpy given the input array)
CASES = {
    "reshape": ({"type": "reshape", "shape": [-1]}, (2, 3, 4, 5), lambda a: a.reshape(2, -1)),
    "view": ({"type": "view", "shape": [4, 15]}, (2, 3, 4, 5), lambda a: a.reshape(2, 4, 15)),
    "permute": ({"type": "permute", "dims": [0, 2, 3, 1]}, (2, 3, 4, 5), lambda a: a.transpose(0, 2, 3, 1)),
    "layout": ({"type": "layout", "src": "NHWC", "dst": "NCHW"}, (2, 4, 5, 3), lambda a: a.transpose(0, 3, 1, 2)),
    "transpose": ({"type": "transpose", "dim0": 2, "dim1": -1}, (2, 3, 4, 5), lambda a: a.swapaxes(2, 3)),
    "squeeze": ({"type": "squeeze", "dim": 1}, (2, 1, 4, 5), lambda a: a[:, 0]),
    "unsqueeze": ({"type": "unsqueeze", "dim": -1}, (2, 3, 4, 5), lambda a: a[..., None]),
    "crop": ({"type": "crop", "top": 1, "left": 2, "height": 2, "width": 3}, (2, 3, 4, 6),
             lambda a: a[:, :, 1:3, 2:5]),
    "center_crop": ({"type": "center_crop", "height": 2, "width": 3}, (2, 3, 5, 6),
                    lambda a: a[:, :, 2:4, 2:5]),  # torchvision: round((5-2)/2) = 2, round((6-3)/2) = 2
    "narrow": ({"type": "narrow", "dim": -1, "start": 1, "length": 3}, (2, 3, 4, 5), lambda a: a[..., 1:4]),
    "batch_slice": ({"type": "batch_slice", "start": 1, "stop": 4, "step": 2}, (5, 3, 2, 2), lambda a: a[1:4:2]),
    "select_channels": ({"type": "select_channels", "channels": [0, 2]}, (2, 3, 4, 5), lambda a: a[:, [0, 2]]),
    "expand_channels": ({"type": "expand_channels", "channels": 3}, (2, 1, 4, 5),
                        lambda a: np.repeat(a, 3, axis=1)),
    "channel_order": ({"type": "channel_order", "order": [1, 2, 0]}, (2, 3, 4, 5), lambda a: a[:, [1, 2, 0]]),
    "bgr_to_rgb": ({"type": "bgr_to_rgb"}, (2, 3, 4, 5), lambda a: a[:, ::-1]),
    "rgb_to_bgr": ({"type": "rgb_to_bgr"}, (2, 3, 4, 5), lambda a: a[:, ::-1]),
}

# name -> parameter sets that must be refused when the stage is built
BAD = {
    "reshape": [{"shape": []}, {"shape": [-1, -1]}, {"shape": [0, 4]}, {"shape": "4,4"}],
    "view": [{"shape": [2, -2]}],
    "permute": [{"dims": [1, 0, 2, 3]}, {"dims": [0, 1, 1, 3]}, {"dims": [0, 1.0]}],
    "layout": [{"src": "NHCW", "dst": "NCHW"}, {"src": "NHWC", "dst": "NHWC"}],
    "transpose": [{"dim0": 0, "dim1": 1}, {"dim0": 2, "dim1": 2}, {"dim0": "1", "dim1": 2}],
    "squeeze": [{"dim": 0}, {"dim": True}],
    "unsqueeze": [{"dim": 0}, {"dim": 1.5}],
    "crop": [{"top": -1, "left": 0, "height": 2, "width": 2}, {"top": 0, "left": 0, "height": 0, "width": 2},
             {"top": 0, "left": 0, "height": 2, "width": 2, "layout": "CHW"}],
    "center_crop": [{"height": 0, "width": 2}, {"height": 2, "width": 1.5}],
    "narrow": [{"dim": 0, "start": 0, "length": 1}, {"dim": 1, "start": -1, "length": 1},
               {"dim": 1, "start": 0, "length": 0}],
    "batch_slice": [{"step": 0}, {"start": 3, "stop": 2}, {"start": -1}],
    "select_channels": [{"channels": []}, {"channels": [-1]}, {"channels": 0}],
    "expand_channels": [{"channels": 1}, {"channels": 3, "layout": "HWC"}],
    "channel_order": [{"order": [0, 1, 2]}, {"order": [0, 0, 1]}, {"order": [1, 2]}],
    "bgr_to_rgb": [{"layout": "RGB"}],
    "rgb_to_bgr": [{"layout": 3}],
}


def test_every_registered_stage_has_a_contract_case_and_bad_parameters():
    assert set(CASES) == set(STAGES)
    assert set(BAD) == set(STAGES)


@pytest.mark.parametrize("memory", ["contiguous", "channels_last"])
@pytest.mark.parametrize("name", sorted(STAGES))
def test_stage_contract(name, memory):
    spec, shape, expected = CASES[name]
    arr = _values(shape)
    x = torch.from_numpy(arr) if memory == "contiguous" or len(shape) != 4 else _nchw_strided(arr)
    compose = build_stages([spec])
    stage = compose.stages[0]
    assert stage.name in (name, "reshape")
    ledger = Ledger()
    version = x._version
    if name in ("reshape", "view") and not x.is_contiguous():
        with pytest.raises(StageError, match="torch refused the view"):
            compose(x, ledger)  # merging axes of a permuted batch cannot be a view: refused, never copied
        return
    out = compose(x, ledger, batch_index=3)
    # a view of the input, no write, ledger says so
    assert is_view_of(out, x)
    assert x._version == version
    row = ledger.stages()[0]
    assert row["views"] == row["batches"] == 1 and row["copies"] == 0 and row["bytes_allocated"] == 0
    assert row["first_batch"] == 3 and row["stage"] == stage.name and row["stage_index"] == 0
    want = expected(arr)
    if compose.runs_at_boundary[0]:
        assert row["deferred"] is True
        assert out is x
        result = QuantizerBoundary([0.0] * want.shape[1], [1.0] * want.shape[1],
                                   channel_order=compose.boundary_channel_order)(out)
        assert np.array_equal(result.numpy(), want.astype(np.float32))
    else:
        result = out
        assert np.array_equal(out.numpy(), want)
    # output_shape is the real shape (pure: computed without data, by the stage and by Compose)
    assert stage.output_shape(shape) == tuple(result.shape) == want.shape
    assert compose.output_shape(shape) == want.shape


@pytest.mark.parametrize("name", sorted(STAGES))
def test_bad_parameters_are_rejected_at_construction(name):
    cls = STAGES[name]
    for params in BAD[name]:
        with pytest.raises(StageError):
            cls(**params)
        with pytest.raises(ConfigError) as info:
            build_stages([{"type": "layout", "src": "NHWC", "dst": "NCHW"}, dict(params, type=name)])
        assert "preprocess.stages[1]" in str(info.value)


def test_a_stage_that_allocates_is_a_contract_violation_named_in_the_error():
    @dataclasses.dataclass(frozen=True)
    class Rogue(Stage):
        name = "rogue_copy"

        def output_shape(self, shape):
            return shape

        def apply(self, x):
            return x.contiguous().clone()

    x = torch.zeros(2, 3, 4, 4)
    ledger = Ledger()
    with pytest.raises(StageError, match=r"stage 1 'rogue_copy': contract violation: .*allocated 384 bytes"):
        Compose([build_stage({"type": "crop", "top": 0, "left": 0, "height": 4, "width": 4}), Rogue()])(x, ledger)
    row = ledger.stages()[1]
    assert row["copies"] == 1 and row["views"] == 0 and row["bytes_allocated"] == 384


def test_in_place_writes_dtype_changes_and_shape_lies_are_contract_violations():
    @dataclasses.dataclass(frozen=True)
    class Writer(Stage):
        name = "writer"

        def output_shape(self, shape):
            return shape

        def apply(self, x):
            return x.add_(0)

    @dataclasses.dataclass(frozen=True)
    class Retype(Writer):
        name = "retype"

        def apply(self, x):
            return x.view(torch.int8)

    @dataclasses.dataclass(frozen=True)
    class Liar(Writer):
        name = "liar"

        def output_shape(self, shape):
            return shape[:1] + (shape[1] + 1,) + shape[2:]

        def apply(self, x):
            return x.permute(0, 1, 2, 3)

    @dataclasses.dataclass(frozen=True)
    class Numpy(Writer):
        name = "to_numpy"

        def apply(self, x):
            return x.numpy()

    x = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    with pytest.raises(StageError, match=r"'to_numpy': contract violation: it returned ndarray, not a torch.Tensor"):
        Compose([Numpy()])(x, Ledger())
    with pytest.raises(StageError, match=r"stage 0 'writer': contract violation: an in-place write .*_version"):
        Compose([Writer()])(x)
    with pytest.raises(StageError, match=r"'retype': contract violation: it changed the dtype"):
        Compose([Retype()])(x)
    with pytest.raises(StageError, match=r"'liar': contract violation: its output shape \(2, 3, 4, 4\) differs"):
        Compose([Liar()])(x)


def test_a_stage_that_breaks_the_contract_only_on_a_later_batch_is_still_caught():
    """The full check runs once per geometry; later batches are compared with what it proved."""
    @dataclasses.dataclass(frozen=True)
    class Sometimes(Stage):
        name = "sometimes"
        misbehave: tuple = ()

        def output_shape(self, shape):
            return shape[:2] + (shape[2] - 1,) + shape[3:]

        def apply(self, x):
            calls.append(1)
            view = x[:, :, 1:]
            if len(calls) not in self.misbehave:
                return view
            if self.misbehave[0] == "copy":
                return view.clone()
            if self.misbehave[0] == "write":
                x.add_(0)
                return view
            if self.misbehave[0] == "shift":  # another view of the same batch, not the proven one
                return x[:, :, :-1]
            return view.contiguous().view(torch.int8) if self.misbehave[0] == "retype" else view

    crop = build_stage({"type": "crop", "top": 0, "left": 1, "height": 4, "width": 3})
    source = torch.zeros(6, 3, 5, 4, dtype=torch.uint8)
    for kind, message in (("copy", r"stage 1 'sometimes': contract violation: .*does not share storage"),
                          ("write", r"stage 1 'sometimes': contract violation: an in-place write"),
                          ("retype", "stage 1 'sometimes': contract violation")):
        calls = []
        compose = Compose([crop, Sometimes(misbehave=(kind, 3))])
        ledger = Ledger()
        for b in range(2):  # batches of one geometry: the first proves it, the second uses the proof
            out = compose(source[2 * b:2 * b + 2], ledger, b)
            assert is_view_of(out, source) and out.shape == (2, 3, 3, 3)
        with pytest.raises(StageError, match=message):
            compose(source[4:6], ledger, 2)
        assert len(compose._proven) == 1
    calls = []
    shifted = Compose([Sometimes(misbehave=("shift", 2))])
    shifted(source[:2])
    assert torch.equal(shifted(source[2:4]), source[2:4, :, :-1])  # a view elsewhere: checked again, allowed
    ledger = Ledger()
    compose = Compose([crop])
    for b in range(3):
        compose(source[2 * b:2 * b + 2], ledger, b)
    [row] = ledger.stages()
    assert row["views"] == row["batches"] == 3 and row["copies"] == 0


def test_registry_errors_name_the_index_the_valid_names_and_the_closest_match():
    with pytest.raises(ConfigError) as info:
        build_stages([{"type": "layout", "src": "NHWC", "dst": "NCHW"}, {"type": "center_corp", "height": 2}])
    msg = str(info.value)
    assert "preprocess.stages[1]" in msg and "'center_corp'" in msg and "did you mean 'center_crop'" in msg
    assert "bgr_to_rgb" in msg and "select_channels" in msg  # the valid names are listed
    with pytest.raises(ConfigError, match=r"stages\[0\]\.hieght: unknown key.*did you mean 'height'"):
        build_stages([{"type": "center_crop", "hieght": 2, "width": 2}])
    with pytest.raises(ConfigError, match=r"stages\[0\]: missing required key\(s\) width"):
        build_stages([{"type": "center_crop", "height": 2}])
    with pytest.raises(ConfigError, match=r"stages\[0\]: crop: parameter 'top' must be >= 0, got -3"):
        build_stages([{"type": "crop", "top": -3, "left": 0, "height": 2, "width": 2}])
    with pytest.raises(ConfigError, match="expected a list of stages"):
        build_stages({"type": "crop"})


def test_output_shape_checks_a_config_before_any_data():
    compose = build_stages([{"type": "layout", "src": "NHWC", "dst": "NCHW"},
                            {"type": "crop", "top": 0, "left": 0, "height": 300, "width": 300}])
    with pytest.raises(StageError, match=r"stage 1 'crop' \(input shape \(8, 3, 224, 224\)\): crop: box \(top 0, "
                                         r"left 0, height 300, width 300\) exceeds the input's 224x224"):
        compose.output_shape((8, 224, 224, 3))
    assert build_stages([{"type": "layout", "src": "NHWC", "dst": "NCHW"},
                         {"type": "center_crop", "height": 200, "width": 100}]).output_shape((8, 224, 224, 3)) == \
        (8, 3, 200, 100)
    assert build_stages([]).output_shape((2, 3, 4, 5)) == (2, 3, 4, 5)


def test_bgr_to_rgb_before_the_layout_move_is_followed_to_the_boundary():
    arr = _values((2, 6, 7, 3))
    compose = build_stages([{"type": "bgr_to_rgb", "layout": "NHWC"}, {"type": "layout", "src": "NHWC", "dst": "NCHW"},
                            {"type": "center_crop", "height": 4, "width": 4}])
    assert compose.boundary_channel_order == [2, 1, 0]
    assert compose.runs_at_boundary == (True, False, False)
    mean, std = [10.0, 20.0, 30.0], [2.0, 4.0, 8.0]
    view = compose(torch.from_numpy(arr))
    out = QuantizerBoundary(mean, std, channel_order=compose.boundary_channel_order)(view)
    ref = arr[..., ::-1].transpose(0, 3, 1, 2)[:, :, 1:5, 2:6].astype(np.float32)
    ref = (ref - np.array(mean, np.float32)[:, None, None]) / np.array(std, np.float32)[:, None, None]
    assert np.array_equal(out.numpy(), ref)
    assert compose.output_shape(arr.shape) == out.shape == (2, 3, 4, 4)


def test_bgr_to_rgb_before_the_layout_move_without_its_layout_says_to_give_it_nhwc():
    with pytest.raises(ConfigError) as info:
        build_stages([{"type": "bgr_to_rgb"}, {"type": "layout", "src": "NHWC", "dst": "NCHW"}])
    assert str(info.value).endswith("stage 0 'bgr_to_rgb' reads its batch as NCHW (channels on axis 1), but it stands "
                                    "before the layout stage, where the batch is still NHWC: give it layout: NHWC, or "
                                    "move it after the layout stage")


def test_channel_gathers_compose_and_a_progression_selection_stays_a_view():
    assert build_stages([{"type": "select_channels", "channels": [0, 2]}]).runs_at_boundary == (False,)
    sel = build_stages([{"type": "select_channels", "channels": [2, 0]}])
    assert sel.runs_at_boundary == (True,) and sel.boundary_channel_order == [2, 0]
    both = build_stages([{"type": "bgr_to_rgb"}, {"type": "select_channels", "channels": [0]}])
    assert both.runs_at_boundary == (True, True) and both.boundary_channel_order == [2]
    assert both.output_shape((2, 3, 4, 4)) == (2, 1, 4, 4)
    twice = build_stages([{"type": "bgr_to_rgb"}, {"type": "channel_order", "order": [1, 2, 0]}])
    assert twice.boundary_channel_order == [1, 0, 2]  # out[c] = bgr[order[c]] = x[2 - order[c]]
    with pytest.raises(ConfigError, match=r"stage 1 'select_channels': select_channels: channels \[3\] do not exist"):
        build_stages([{"type": "bgr_to_rgb"}, {"type": "select_channels", "channels": [3]}])


@pytest.mark.parametrize("specs, message", [
    ([{"type": "bgr_to_rgb", "layout": "NHWC"}], "ends on axis 3 of a 4-D view"),
    ([{"type": "bgr_to_rgb", "layout": "NHWC"}, {"type": "layout", "src": "NHWC", "dst": "NCHW"},
      {"type": "narrow", "dim": 1, "start": 0, "length": 2}], "stage 2 'narrow': changes axis 1"),
    ([{"type": "bgr_to_rgb"}, {"type": "reshape", "shape": [-1]}], "stage 1 'reshape': changes axis 1"),
    ([{"type": "bgr_to_rgb"}, {"type": "permute", "dims": [0, 2, 1]}],
     r"stage 1 'permute': permute: dims \[0, 2, 1\] need a 3-D input, got 4-D"),
    ([{"type": "bgr_to_rgb"}, {"type": "expand_channels"}], "stage 1 'expand_channels': changes axis 1"),
    ([{"type": "bgr_to_rgb"}, {"type": "select_channels", "channels": [0], "layout": "NHWC"}],
     "gathers channels on axis 3"),
])
def test_a_deferred_channel_order_that_cannot_reach_the_boundary_is_a_config_error(specs, message):
    with pytest.raises(ConfigError, match=message):
        build_stages(specs)


def test_calling_a_deferred_stage_directly_says_where_it_runs():
    with pytest.raises(StageError, match="carried out inside the quantizer boundary"):
        build_stage({"type": "bgr_to_rgb"})(torch.zeros(1, 3, 2, 2))


def test_compose_rejects_non_tensors_and_wraps_stage_errors_with_shape_and_dtype():
    compose = build_stages([{"type": "squeeze", "dim": 1}])
    with pytest.raises(StageError, match="expects a torch.Tensor"):
        compose(np.zeros((2, 1, 3, 3)))
    with pytest.raises(StageError, match=r"stage 0 'squeeze' \(input shape \(2, 2, 3, 3\)\): squeeze: axis 1 has "
                                         r"size 2"):
        compose(torch.zeros(2, 2, 3, 3))
