"""``python -m pipeline xmodel run FILE --input X.npy [--dump DIR]``: run any quantized xmodel on the CPU.

The file is checked first (``xmodel_check``: a broken file is not run), rebuilt by ``reader.check``
and run by the project's interpreter (``interp.run``: XIR's ops in float32, ``fix`` as the DPU rounds),
bit for bit as the simulation (and the real quantizer's test mode) computes the same graph.

Inputs: one float ``.npy`` per data op, in model argument order (``interp.data_ops``); an integer or bool
array (raw pixels, int8 codes) is refused, saying how to convert it (codes times ``2**-fix_pos`` of the
input's fix op, which the message names). The file's
data ops are NHWC (``[1, H, W, C]``, XIR's layout); an input is taken in the model's layout as PyTorch
gives it, NCHW ``[1, C, H, W]``, or already NHWC as the file has it (``layout="nhwc"``; "auto" takes
NCHW when both fit, i.e. C == H == W). A missing batch axis is added; the batch must be 1 (the file's).
Non-4-D inputs are taken as the data op's dims. Values are converted to float32; an input holding NaN or
inf (after that conversion: a float64 value beyond float32's range too) is refused, the project's rule for
non-finite inputs (``quantizers/sim/finite.py``).

Outputs are the file's values in the file's layout: NHWC for a 4-D feature map, but NCHW (the model's) for a
file that ends in a transpose back to NCHW (:func:`layouts` tells each 4-D output's axes).
"""
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from pipeline.errors import PipelineError

LAYOUTS = ("auto", "nchw", "nhwc")
TO_NCHW = (0, 3, 1, 2)


class XmodelRunError(PipelineError):
    """The file cannot be run as asked: inputs that are missing, unreadable, of another dtype or shape
    than the data ops take, or an op the interpreter cannot compute (a custom op whose semantics the
    file does not carry). The message says what was expected and what to do."""


def _not_float(path: str, array: np.ndarray, name: str, fix_pos: Optional[int]) -> XmodelRunError:
    """The refusal of a non-float ``.npy``: what it holds, what the run takes, how to convert it."""
    if fix_pos is None:
        codes = ("this file keeps the data op's values in float (no fix op reads it), so it takes no int8 codes "
                 "there")
    else:
        codes = ("int8 codes of the input: x = codes.astype(numpy.float32) * 2.0 ** -%d (the fix position the "
                 "file's fix op rounds data op %r at)" % (fix_pos, name))
    return XmodelRunError(
        "--input %s: dtype %s (integer values, e.g. raw pixels or int8 codes); the run takes the float input the "
        "model takes, after its preprocessing, and reading integers as such values would give meaningless outputs. "
        "Convert it first and save it as float32: raw pixels: apply the preprocessing the model was trained "
        "with (e.g. (x - mean) / std per channel, in its layout); %s" % (path, array.dtype, codes))


def _read_npy(path: str, name: str = "", fix_pos: Optional[int] = None) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise XmodelRunError("--input %s: no such file; give a float .npy array" % path) from None
    except IsADirectoryError:
        raise XmodelRunError("--input %s: a folder; give a float .npy array" % path) from None
    except Exception as e:  # numpy's errors for a non-.npy file vary by version
        raise XmodelRunError("--input %s: not a .npy array (%s: %s); save the input with numpy.save(path, x) "
                             "(an .npz or a pickled object is not taken)" % (path, type(e).__name__, str(e)[:160])) \
            from None
    if isinstance(array, np.ndarray) and array.dtype.kind in "iub":
        raise _not_float(path, array, name, fix_pos)
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        raise XmodelRunError("--input %s: dtype %s; expected float values (float32, as the model takes them after "
                             "preprocessing)" % (path, getattr(array, "dtype", type(array).__name__)))
    with np.errstate(over="ignore", invalid="ignore"):  # a float64 value beyond float32's range: inf, refused below
        array = array.astype(np.float32)
    nan, inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
    if nan or inf:  # the project's non-finite rule (quantizers/sim/finite.py): such an input is refused
        raise XmodelRunError("--input %s: holds %d NaN and %d inf of %d values (after conversion to float32): NaN "
                             "and inf pass through every op, so the run's outputs would be NaN or inf and say "
                             "nothing of the file (the DPU's fix codes have no NaN); give a finite input, the "
                             "preprocessed sample" % (path, nan, inf, array.size))
    return array


def fit_input(path: str, array: np.ndarray, dims: Sequence[int], name: str, layout: str = "auto") -> np.ndarray:
    """``array`` in the layout the interpreter takes: NCHW for a 4-D data op (whose dims are NHWC), for a 3-D one
    its dims or NCW (a 1-D conv's NWC input, which the interpreter lays out), else the data op's dims.

    Args:
        path: the .npy path (for messages); array: its float32 values; dims: the data op's dims;
        name: the data op's name; layout: "auto", "nchw" or "nhwc" (how a 4-D ``array`` is laid out).

    Raises:
        XmodelRunError: a batch other than the data op's, or a shape that fits the data op in no layout.
    """
    dims = [int(d) for d in dims]
    if array.ndim == len(dims) - 1 and dims and dims[0] == 1:
        array = array[None]  # one sample without its batch axis
    if len(dims) == 4:
        nchw = [dims[0], dims[3], dims[1], dims[2]]
        fits = {"nchw": list(array.shape) == nchw, "nhwc": list(array.shape) == dims}
        order = ("nchw", "nhwc") if layout == "auto" else (layout,)
        for candidate in order:
            if fits[candidate]:
                return np.ascontiguousarray(array if candidate == "nchw" else array.transpose(TO_NCHW))
        expected = "NCHW %s (the model's layout, as PyTorch gives it) or NHWC %s (the file's)" % (nchw, dims)
        if layout != "auto":
            expected = {"nchw": "NCHW %s" % nchw, "nhwc": "NHWC %s" % dims}[layout]
    else:
        if list(array.shape) == dims:
            return np.ascontiguousarray(array)
        expected = "%s" % dims
        if len(dims) == 3:  # a 1-D conv's input: the file's NWC, or the model's NCW (the interpreter lays it out)
            ncw = [dims[0], dims[2], dims[1]]
            if list(array.shape) == ncw:
                return np.ascontiguousarray(array)
            expected = "%s (the file's), or NCW %s (the model's layout, for a 1-D conv's NWC input)" % (dims, ncw)
    if array.ndim == len(dims) and dims and array.shape[0] != dims[0] and (
            sorted(array.shape[1:]) == sorted(dims[1:])):
        raise XmodelRunError("--input %s: a batch of %d, but the file's data op %r takes batch %d (the quantizer "
                             "writes batch 1): give one sample, e.g. numpy.save(path, x[:1])"
                             % (path, array.shape[0], name, dims[0]))
    raise XmodelRunError("--input %s: shape %s does not fit the file's data op %r: expected %s. Give the input "
                         "of this model (another model's input, or one of another size, does not run)"
                         % (path, list(array.shape), name, expected))


def clamp_warning(array: np.ndarray, name: str, fix_pos: int, bits: int) -> Optional[str]:
    """A warning when most of an input's values lie outside the range its fix op takes at ``fix_pos`` (they
    clamp to the code range's ends: unnormalized pixels, 0..255, fed where the model takes its preprocessed
    input), else None."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    scaled = np.floor(array.astype(np.float64) * (2.0 ** fix_pos) + 0.5)
    clamped = int(np.count_nonzero((scaled < lo) | (scaled > hi)))
    if not array.size or 2 * clamped <= array.size:
        return None
    return ("input %s: %d of %d values (%.0f%%) lie outside [%g, %g], the range its fix takes at fix_pos %d "
            "(%d-bit codes %d..%d), and clamp to its ends: the outputs say little of the file. Unnormalized "
            "pixels (0..255)? The run takes the model's input after its preprocessing (e.g. (x - mean) / std per "
            "channel), as the quantizer was calibrated with" % (name, clamped, array.size, 100.0 * clamped / array.size,
                                                                lo * 2.0 ** -fix_pos, hi * 2.0 ** -fix_pos, fix_pos,
                                                                bits, lo, hi))


def run_file(graph: Any, input_paths: Sequence[str], layout: str = "auto") -> Dict[str, Any]:
    """Run a checked graph (``reader.check``) on the given .npy inputs.

    Returns:
        ``{"inputs": [{"name", "file", "shape" (as given), "dims" (the data op's), "warning" (only where most
        of its values clamp at its fix: :func:`clamp_warning`)}],
        "values": {op name: float32 torch tensor in the file's dims and layout (NHWC for 4-D)},
        "outputs": [op names of the graph's outputs, in file order]}``.

    Raises:
        XmodelRunError: the input count differs from the data ops', an input does not fit (see
            :func:`fit_input`), or the interpreter cannot compute an op (named).
    """
    import torch
    from pipeline.inspect.deploy_dump import fix_position
    from pipeline.xir import interp
    datas = interp.data_ops(graph)
    if len(input_paths) != len(datas):
        raise XmodelRunError("%d --input given, the file has %d data op%s: %s (in model argument order); give one "
                             "--input X.npy per data op, in that order"
                             % (len(input_paths), len(datas), "" if len(datas) == 1 else "s",
                                ", ".join("%s %s" % (op.name, list(op.shape)) for op in datas)))
    tensors, described = [], []
    for path, op in zip(input_paths, datas):
        fix = fix_position(graph, op.name)  # the file's input quantization, None for an input kept in float
        raw = _read_npy(path, op.name, None if fix is None else fix[0])
        tensors.append(torch.from_numpy(fit_input(path, raw, op.shape, op.name, layout)))
        described.append({"name": op.name, "file": path, "shape": list(raw.shape), "dims": list(op.shape)})
        warning = None if fix is None else clamp_warning(raw, op.name, fix[0], fix[1])
        if warning:
            described[-1]["warning"] = warning
    try:
        values = interp.run(graph, tensors)
    except PipelineError as e:
        raise XmodelRunError("cannot run the file: %s" % e) from None
    return {"inputs": described, "values": values, "outputs": interp.outputs(graph)}


def write_dump(folder: str, graph: Any, values: Dict[str, Any]) -> Dict[str, Any]:
    """Write a run's values to ``folder`` as the real quantizer's deploy-check dumps (``<name>.bin`` float32,
    ``<name>_fix.bin`` codes, ``shape.txt``; ``deploy_dump.write_dump``), a reference for
    ``python -m pipeline compare``.

    Returns:
        ``{"folder", "files", "tensors", "codes"}``.
    """
    from pipeline.inspect.deploy_dump import write_dump as write
    return write(folder, graph, values)


def layouts(graph: Any) -> Dict[str, str]:
    """op name -> what the axes of its 4-D value are in the file (``"NHWC"``, ``"NCHW"``, ...), for every 4-D op.

    nndct writes a 4-D feature map NHWC (data ops, convolutions, pools, ...); a ``transpose`` reorders its
    input's axes by ``order`` (a model ending in ``.permute(0, 3, 1, 2)`` after an NHWC value ends in NCHW: the
    file then holds the output in the model's layout); an op whose dims are one of its 4-D inputs' keeps that
    input's axes (a ``fix``, an element-wise op). Any other 4-D op is NHWC. A permute the quantizer folds away
    (a model's ``.permute(0, 2, 3, 1)`` of an NCHW feature map, which is the file's NHWC already) leaves no op,
    so a token layout the model holds (``[N, H, W, C]`` in torch) reads as NHWC here too."""
    found = {}  # type: Dict[str, str]
    for op in graph.ops:
        if len(op.shape) != 4:
            continue
        sources = [i for arg in sorted(op.inputs) for i in op.inputs[arg] if len(i.shape) == 4]
        if op.type == "transpose" and sources and op.attr("order") is not None:
            axes = found.get(sources[0].name, "NHWC")
            found[op.name] = "".join(axes[int(i)] for i in op.attr("order"))
            continue
        same = [i for i in sources if list(i.shape) == list(op.shape) and i.type != "const"]
        found[op.name] = found.get(same[0].name, "NHWC") if same and op.type != "data" else "NHWC"
    return found


def describe_value(name: str, op_type: str, value: Any, fix_pos: Optional[int],
                   layout: str = "NHWC") -> Dict[str, Any]:
    """One output's summary: ``{"name", "op", "shape" (file's), "layout" (the file's axes of a 4-D value,
    :func:`layouts`; None for other ranks), "model_shape" (NCHW for 4-D), "fix_pos", "min", "max", "mean",
    "argmax" (flat index over the whole tensor), "first" (up to 8 values)}``."""
    x = value.detach().contiguous().float()
    flat = x.reshape(-1)
    finite = flat[flat.isfinite()] if flat.numel() else flat
    shape = list(x.shape)
    four = len(shape) == 4 and sorted(layout) == sorted("NCHW")
    return {"name": name, "op": op_type, "shape": shape, "layout": layout if four else None,
            "model_shape": [shape[layout.index(a)] for a in "NCHW"] if four else shape, "fix_pos": fix_pos,
            "min": float(finite.min()) if finite.numel() else None,
            "max": float(finite.max()) if finite.numel() else None,
            "mean": float(finite.mean()) if finite.numel() else None,
            "argmax": int(flat.argmax()) if flat.numel() else None,
            "first": [float(v) for v in flat[:8]]}
