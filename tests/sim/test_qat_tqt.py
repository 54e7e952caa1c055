"""The QAT quantizer (TQT): forward = PTQ's fake_quant at b-1-ceil(log2 t), the real quantizer's gradients
(ties included), the warm-up rules, the state_dict layout."""
import math

import numpy as np
import pytest
import torch

from pipeline import fixpoint
from pipeline.quantizers.sim.qat.tqt import INPUT, OUTPUT, PARAM, TQTQuantizer, kl_j, three_sigma


def _quantizer(kind, logt, bits=8):
    q = TQTQuantizer(bits, kind)
    q.import_fix_pos(bits, bits - 1 - int(math.ceil(logt)))
    q.log_threshold.data.fill_(logt)
    return q


@pytest.mark.parametrize("kind,method", [(PARAM, "std_round"), (INPUT, "half_up"), (OUTPUT, "half_up")])
@pytest.mark.parametrize("logt", [-0.5, 0.0, 0.25, 2.0, 3.7])
def test_qat_forward_is_fake_quant_at_the_fix_position_the_threshold_gives(kind, method, logt):
    q = _quantizer(kind, logt)
    fp = 7 - math.ceil(logt)
    assert q.own_fix_pos() == fp
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, generator=g) * 4
    ties = (torch.arange(-40, 40, dtype=torch.float32) + 0.5) * 2.0 ** -fp  # every value a half-LSB tie
    for t in (x, ties):
        assert torch.equal(q(t), fixpoint.fake_quant(t, fp, 8, method))


def test_qat_gradients_follow_the_real_backward_ties_and_clipping():
    # b = 8, log2 t = 0: scale 1/128, codes -128..127
    q = _quantizer(OUTPUT, 0.0)
    s = 1.0 / 128
    v = torch.tensor([12.8, 2.5, -1.5, 3.5, 200.0, -128.4, 127.4])
    x = (v * s).requires_grad_(True)
    y = q(x)
    y.backward(torch.ones_like(y))
    # the backward's rounding: torch.round (half-even) except negative ties toward zero
    r = torch.tensor([13.0, 2.0, -1.0, 4.0, 0.0, -128.0, 127.0])
    inside = torch.tensor([1, 1, 1, 1, 0, 1, 1], dtype=torch.bool)
    v32 = x.detach().double() / s  # the float32 inputs' exact values
    term = torch.where(inside, r.double() - v32, torch.tensor([0, 0, 0, 0, 127.0, 0, 0]).double())
    expected = float((s * math.log(2) * term).sum())
    assert q.log_threshold.grad.shape == (1,)
    assert math.isclose(float(q.log_threshold.grad[0]), expected, rel_tol=1e-6)
    assert x.grad.tolist() == inside.float().tolist()
    # the forward rounds the same ties half_up: 2.5 -> 3, -1.5 -> -1, 3.5 -> 4
    assert (y.detach() / s)[1:4].tolist() == [3.0, -1.0, 4.0]
    # below the range: the gradient of log2 t takes n = -128, none reaches x
    low = torch.tensor([-300.0 * s], requires_grad=True)
    q.log_threshold.grad = None
    q(low).backward(torch.ones(1))
    assert math.isclose(float(q.log_threshold.grad[0]), -128 * s * math.log(2), rel_tol=1e-6)
    assert low.grad.tolist() == [0.0]


def test_qat_parameter_warmup_is_mean_plus_three_sigma():
    w = np.random.RandomState(0).randn(64, 3, 3, 3).astype(np.float32) * 0.1
    th = three_sigma(w)
    assert abs(float(th) - (abs(float(np.mean(w.astype(np.float64)))) + 3 * float(np.std(w.astype(np.float64))))) < 1e-5
    q = TQTQuantizer(8, PARAM)
    q(torch.from_numpy(w))
    assert q.warmup_enabled[0] == 0
    assert float(q.log_threshold.detach()[0]) == float(torch.log2(torch.tensor([th]))[0])


def test_qat_activation_warmup_kl_j_few_bins_is_the_max():
    x = np.abs(np.random.RandomState(1).randn(100).astype(np.float32))  # 10 bins < 2**7 + 1
    assert kl_j(x, 8) == np.float32(np.max(x))


def test_qat_activation_warmup_kl_j_clips_a_long_tail():
    rs = np.random.RandomState(2)
    x = np.concatenate([rs.randn(200000), [60.0]]).astype(np.float32)
    th = kl_j(x, 8)
    assert 2.0 < th < 20.0  # far below the one outlier at 60, above the bulk's 2 sigma
    assert kl_j(x, 8) == th  # deterministic


def test_qat_quantizer_state_dict_keys_are_the_real_ones():
    q = TQTQuantizer(8, OUTPUT)
    assert sorted(q.state_dict()) == ["bitwidth", "log_threshold", "warmup_enabled"]
    q.quant_enabled[0] = 0
    x = torch.randn(10)
    assert q(x) is x and q.warmup_enabled[0] == 1  # disabled: float, no warm-up


def test_qat_fix_pos_override_moves_forward_and_gradient_scale():
    q = _quantizer(OUTPUT, 0.0)
    q.fix_pos_override = 5
    x = torch.randn(100, generator=torch.Generator().manual_seed(3))
    assert torch.equal(q(x), fixpoint.fake_quant(x, 5, 8, "half_up"))
    assert q.own_fix_pos() == 7 and q.fix_pos() == 5


def test_qat_bad_tensor_type_and_import_are_refused():
    with pytest.raises(ValueError, match="tensor_type must be one of"):
        TQTQuantizer(8, "weights")
    with pytest.raises(ValueError, match="must be integers"):
        TQTQuantizer(8, PARAM).import_fix_pos(8, 3.5)
