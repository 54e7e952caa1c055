"""Inputs at the quantizer boundary's edges: tensors with the negative bit, tensors that require grad,
row selections that are not integer indices, refused dtypes/layouts/types and empty dimensions."""
import warnings

import numpy as np
import pytest
import torch

from pipeline.boundary import QuantizerBoundary
from pipeline.errors import DataError

MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]
ACCEPTED = "uint8, int8, int16, int32, int64, float16, bfloat16, float32 or float64"
KERNELS = ["auto", "torch"]


def _normalized(x, mean, std):
    """(x - mean) / std in float32 with torch, x already read as its logical float32 values."""
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return (x.float() - m) / s


def _complex(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=torch.cfloat, generator=g) * 100


@pytest.mark.parametrize("layout", ["NCHW", "channels_last"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_tensor_with_the_negative_bit_is_read_as_its_values(kernel, layout):
    neg = _complex((2, 1, 4, 4), 0).conj().imag  # a float32 view whose memory holds -values
    plain = _complex((2, 1, 4, 4), 1).imag  # the same geometry without the bit
    assert neg.is_neg() and not plain.is_neg() and neg.dtype == plain.dtype == torch.float32
    assert neg.shape == plain.shape and neg.stride() == plain.stride()
    b = QuantizerBoundary([3.5], [2.25], layout=layout, kernel=kernel)
    for x in (neg, plain, neg, plain):  # one cached plan must not serve the other
        assert torch.equal(b(x), _normalized(x.resolve_neg(), [3.5], [2.25]))
    rgb = _complex((2, 3, 5, 4), 2).conj().imag
    got = QuantizerBoundary(MEAN, STD, channel_order=[2, 1, 0], layout=layout, kernel=kernel)(rgb, rows=[1, 0])
    assert torch.equal(got, _normalized(rgb.resolve_neg()[[1, 0]][:, [2, 1, 0]], MEAN, STD))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_an_input_that_requires_grad_gives_a_plain_output(kernel, dtype):
    g = torch.Generator().manual_seed(3)
    leaf = (torch.randn(2, 5, 6, 3, generator=g) * 50).to(dtype).requires_grad_()
    view = leaf.permute(0, 3, 1, 2)  # a non-leaf view in the graph
    expect = _normalized(view.detach(), MEAN, STD)
    b = QuantizerBoundary(MEAN, STD, kernel=kernel)
    for out, want in ((b(view), expect), (b(view, rows=[1, 0]), expect[[1, 0]])):
        assert not out.requires_grad and out.grad_fn is None and out.is_leaf
        assert np.array_equal(out.numpy(), want.numpy())  # (.numpy() refuses a tensor that requires grad)
    assert leaf.grad is None


@pytest.mark.parametrize("rows, got, hint", [
    (np.array([True, False, True, False]), "ndarray of shape (4,), dtype bool", "np.flatnonzero(mask)"),
    ([True, False, True, False], "list of shape (4,), dtype bool", "np.flatnonzero(mask)"),
    ([1, True], "list of shape (2,), dtype bool", "np.flatnonzero(mask)"),
    ([0.9, 2.7], "list of shape (2,), dtype float64", "pass integer indices"),
    (np.array([0.0, 1.0], np.float32), "ndarray of shape (2,), dtype float32", "pass integer indices"),
    ("01", "str of shape (), dtype <U2", "pass integer indices"),
    ([[0, 1], [2, 3]], "list of shape (2, 2), dtype int64", "pass integer indices"),
    ([[0, 1], [2]], "list of shape (2,), dtype object", "pass integer indices"),
    (2, "int of shape (), dtype int64", "pass integer indices"),
])
def test_rows_must_be_a_flat_sequence_of_integer_indices(rows, got, hint):
    b = QuantizerBoundary(MEAN, STD)
    x = torch.zeros(4, 3, 2, 2, dtype=torch.uint8)
    with pytest.raises(DataError) as err:
        b(x, rows=rows)
    message = str(err.value)
    assert "takes a 1-D sequence of integer sample indices" in message
    assert "got a " + got in message and hint in message


def test_integer_rows_of_any_integer_kind_still_gather_and_bad_ones_still_say_so():
    b = QuantizerBoundary(MEAN, STD)
    x = torch.from_numpy(np.arange(5 * 3 * 2 * 2, dtype=np.uint8).reshape(5, 3, 2, 2))
    expect = _normalized(x[[3, 1, 2]], MEAN, STD)
    for rows in ([3, 1, 2], (3, 1, 2), np.array([3, 1, 2], np.uint16), np.array([3, 1, 2], np.int8),
                 [np.int64(3), np.int32(1), 2]):
        assert torch.equal(b(x, rows=rows), expect), rows
    assert torch.equal(b(x, rows=range(1, 4)), _normalized(x[1:4], MEAN, STD))
    for rows in ([], np.array([], np.int64), np.array([], bool)):
        with pytest.raises(DataError, match="gathers rows 0..4 of the view, got no rows"):
            b(x, rows=rows)
    with pytest.raises(DataError, match="gathers rows 0..4 of the view, got rows -1..2"):
        b(x, rows=[2, -1])
    with pytest.raises(DataError, match="gathers rows 0..4 of the view, got rows 0..5"):
        b(x, rows=np.array([0, 5], np.uint64))


def _accepted_part(message):
    return message.split("; got ")[0]


@pytest.mark.parametrize("np_dtype, cast, exact", [
    (np.uint16, "a.astype(np.int32)", True), (np.uint32, "a.astype(np.int64)", True),
    (np.uint64, "a.astype(np.int64)", True), (np.bool_, "a.astype(np.uint8)", True),
    (np.complex64, "a.astype(np.float32)", False), (np.dtype(">f4"), "a.astype(np.float32)", False),
])
def test_a_numpy_dtype_the_boundary_does_not_read_says_which_it_reads_and_what_to_do(np_dtype, cast, exact):
    a = np.arange(2 * 3 * 2 * 2).reshape(2, 3, 2, 2).astype(np_dtype)
    if np_dtype is np.uint16:
        a[0, 0, 0, 0] = 65535  # a value only an exact cast keeps
    b = QuantizerBoundary(MEAN, STD)
    with pytest.raises(DataError) as err:
        b(a)
    message = str(err.value)
    assert _accepted_part(message).endswith("dtype " + ACCEPTED) and "bool" not in _accepted_part(message)
    assert "got a numpy array of dtype %s" % np.dtype(np_dtype) in message and cast in message
    if exact:
        assert "keeps every %s value exactly" % np.dtype(np_dtype) in message
        fixed = eval(cast, {"a": a, "np": np})  # the cast the message gives is one the boundary reads
        assert torch.equal(b(fixed), _normalized(torch.from_numpy(a.astype(np.float64)).float(), MEAN, STD))


@pytest.mark.parametrize("name", ["uint16", "uint32", "uint64", "bool"])
def test_a_torch_dtype_the_boundary_does_not_read_says_which_it_reads_and_what_to_do(name):
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip("torch %s has no torch.%s (added in torch 2.3)" % (torch.__version__, name))
    t = torch.zeros(2, 3, 2, 2, dtype=dtype)
    for kernel in KERNELS:
        with pytest.raises(DataError) as err:
            QuantizerBoundary(MEAN, STD, kernel=kernel)(t)
        message = str(err.value)
        assert _accepted_part(message).endswith("dtype " + ACCEPTED)
        assert "got a torch tensor of dtype %s" % name in message
        assert "t.to(torch.%s) keeps every %s value exactly" % (
            {"uint16": "int32", "uint32": "int64", "uint64": "int64", "bool": "uint8"}[name], name) in message


def test_a_sparse_tensor_is_refused_with_to_dense_even_after_a_dense_plan_of_the_same_geometry():
    b = QuantizerBoundary(MEAN, STD)
    coo = torch.ones(1, 3, 4, 4).to_sparse()
    # a dense view of one element with the COO tensor's own strides: (0, 0, 0, 0) in torch 2, (1, 0, 0, 0)
    # in torch 1.13 (both: every element the one stored 7.0, dim 0 of size 1)
    dense = torch.full((1,), 7.0).as_strided(coo.shape, coo.stride())
    assert coo.stride() == dense.stride() and coo.dtype == dense.dtype and dense.layout == torch.strided
    assert torch.equal(b(dense), _normalized(torch.full((1, 3, 4, 4), 7.0), MEAN, STD))
    with pytest.raises(DataError, match=r"dense \(strided\) tensors, got a tensor with layout torch.sparse_coo; "
                                        r"call .to_dense\(\)"):
        b(coo)
    assert torch.equal(b(coo.to_dense()), _normalized(torch.ones(1, 3, 4, 4), MEAN, STD))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Sparse CSR tensor support is in beta state"
        csr = torch.ones(1, 3, 4, 4).to_sparse_csr()  # (has no strides at all)
    with pytest.raises(DataError, match=r"layout torch.sparse_csr; call .to_dense\(\)"):
        b(csr)


@pytest.mark.parametrize("view", [[[[[0]]]], (1, 2), 3.0, None, "x"])
def test_something_that_is_not_an_array_is_refused(view):
    with pytest.raises(DataError) as err:
        QuantizerBoundary([0.0], [1.0])(view)
    message = str(err.value)
    assert "expects a numpy array or torch tensor" in message and "got %s" % type(view).__name__ in message
    assert "np.asarray(x, dtype=np.float32)" in message


@pytest.mark.parametrize("shape, empty", [((0, 3, 4, 4), "N=0"), ((2, 0, 4, 4), "C=0"), ((2, 3, 0, 4), "H=0"),
                                          ((2, 3, 4, 0), "W=0"), ((2, 3, 0, 0), "H=0, W=0")])
@pytest.mark.parametrize("order", [None, [2, 1, 0]])
def test_every_empty_dimension_is_refused_alike(shape, empty, order):
    b = QuantizerBoundary(MEAN, STD, channel_order=order)
    for view in (torch.zeros(shape, dtype=torch.uint8), np.zeros(shape, np.float32),
                 torch.zeros(shape[0], shape[2], shape[3], shape[1]).permute(0, 3, 1, 2)):
        with pytest.raises(DataError) as err:
            b(view)
        message = str(err.value)
        assert "expects a non-empty NCHW batch, every dimension >= 1, got shape %s (%s)" % (shape, empty) in message
        assert "skip empty batches" in message
