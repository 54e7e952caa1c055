"""``y += z`` and the other augmented assignments as torch.jit's trace (which the real quantizer parses) records
them: an in-place write of ``y`` that every name of ``y`` reads afterwards (``aten::add_``). torch.fx's Proxy has
no ``__iadd__``, so a plain trace made ``y = y + z`` of it and a name that held ``y`` before (``identity = y``)
kept the value before the write: the simulation computed another model than the float one, silently
(``fx.tracer.AugmentedAssignments``, ``fx.in_place.augmented_writes``)."""
import pytest
import torch
from torch import nn

from pipeline.apis import torch_quantizer
from pipeline.fx.refusals import NotSimulated


class _Two(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body
        torch.manual_seed(0)
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.d = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.body(self, x)


def _aliased_iadd(m, x):
    y = m.c(x)
    identity = y
    y += 1
    return m.d(y) + identity


def _add_(m, x):  # the same model written with the in-place method
    y = m.c(x)
    return m.d(y.add_(1)) + y


def _aliased_imul(m, x):
    y = m.c(x)
    identity = y
    y *= 2
    return m.d(y) + identity


def _imul(m, x):
    y = m.c(x)
    y *= 2
    return m.d(y)


def _mul(m, x):
    y = m.c(x)
    y = y * 2
    return m.d(y)


def _view_iadd(m, x):
    y = m.c(x)
    v = y.view(-1)
    v += 1
    return m.d(y)


def _size_iadd(m, x):
    n = x.size(0)
    n += 0
    return m.d(m.c(x)).view(n, -1)


def _quantized(body, tmp_path, name):
    x = torch.randn(8, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    folder = str(tmp_path / name)
    q = torch_quantizer("calib", _Two(body), (x[:1],), output_dir=folder)
    q.quant_model(x)
    q.export_quant_config()
    q = torch_quantizer("test", _Two(body), (x[:1],), output_dir=folder)
    q.quant_model(x[:1])
    return q, q.quant_model(x), _Two(body)(x.clone())


def test_a_name_that_held_y_reads_the_write(tmp_path):
    """``identity = y; y += 1``: the float model adds 1 to both; the simulation equals the model written with
    ``y.add_(1)`` bit for bit (before: identity read the conv output, 1.03 off on a range of 2.4)."""
    q, got, float_out = _quantized(_aliased_iadd, tmp_path, "iadd")
    _, want, float_add_ = _quantized(_add_, tmp_path, "add_")
    assert torch.equal(float_out, float_add_)
    assert torch.equal(got, want)
    assert (got - float_out).abs().max() < 0.1
    q.export_xmodel(output_dir=str(tmp_path / "iadd"), deploy_check=False)


@pytest.mark.parametrize("body", [_view_iadd, _aliased_imul])
def test_a_write_another_name_reads_is_refused_before_calibration(body, tmp_path):
    """A view written with ``+=`` whose base is read after (the real quantizer's add runs out of place, as for
    ``v.add_(1)``), or ``y *= 2`` another name reads after (nndct's custom aten::mul_, not simulated): refused."""
    x = torch.randn(2, 3, 8, 8)
    with pytest.raises(NotSimulated, match="in place"):
        torch_quantizer("calib", _Two(body), (x,), output_dir=str(tmp_path))


def test_an_unshared_augmented_assignment_is_the_plain_operator(tmp_path):
    """``y *= 2`` no other name reads, and ``n += 0`` on a size, compute as before (``y = y * 2``)."""
    _, got, _ = _quantized(_imul, tmp_path, "imul")
    _, want, _ = _quantized(_mul, tmp_path, "mul")
    assert torch.equal(got, want)
    _quantized(_size_iadd, tmp_path, "size")


def _slice_iadd(m, x):
    y = m.c(x)
    y[:, 0:2] += 1
    return m.d(y)


def test_an_assignment_into_part_of_a_tensor_is_told_as_such(tmp_path):
    """``y[:, 0:2] += 1``: fx cannot trace the item assignment; the message says so and what to write (it spoke
    of data-dependent control flow, which the line has none of)."""
    from pipeline.errors import QuantizationError
    with pytest.raises(QuantizationError, match=r"assignment into part of a tensor .*torch\.cat") as info:
        torch_quantizer("calib", _Two(_slice_iadd), (torch.randn(2, 3, 8, 8),), output_dir=str(tmp_path))
    assert "control flow" not in str(info.value)
