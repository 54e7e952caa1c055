"""nndct's command-line option the drop-in reads: ``--nndct_quant_off``, the quantization-off flow.

The real quantizer reads its options from the command line when ``pytorch_nndct`` is imported
(``_init_torch_nndct_module`` in ``pytorch_nndct/__init__.py``, ``option_util.add_valid_nndct_option``): an
argument ``--nndct_<name>`` sets ``NndctOption.nndct_<name>``; a bool option given alone (or before another
``-`` argument) is True, ``--nndct_<name> True|False`` and ``--nndct_<name>=True|False`` set the value, and the
arguments it took are removed from ``sys.argv``. The drop-in does the same for ``nndct_quant_off`` (option
name ``quant_off``, ``nndct_shared/utils/option_list.py``) when ``pipeline.apis`` is imported, and leaves
every other argument where it is.

Under it (``pytorch_nndct/__init__.py`` also turns off ``nndct_param_corr`` and ``nndct_equalization``; the
modules run their float forward; ``quantize_tensors`` returns the float tensor; ``organize_quant_pos``
returns; ``xir_compiler.do_compile`` drops the quant info): calibration writes every entry of
``quant_info.json`` with a null fix position, test mode computes in float, and ``export_xmodel`` writes
``<Model>_float.xmodel`` without fix ops.

:func:`set_option_value` is the explicit switch (``nndct_shared.utils.option_util.set_option_value``, which
the real one also has); a quantizer reads the option when ``torch_quantizer`` makes it (the real one reads it
at each use).
"""
import sys
from typing import List, Optional

QUANT_OFF = "nndct_quant_off"


class _Option:
    """One nndct option: ``value`` (``NndctOption.<name>.value``)."""

    def __init__(self, name: str, value: bool) -> None:
        self.name, self.value = name, value


def _from_argv(argv: List[str]) -> Optional[bool]:
    """``--nndct_quant_off`` in ``argv`` as ``add_valid_nndct_option`` reads it: the value (None when absent
    or malformed), and the arguments it took removed from ``argv`` in place."""
    value = None  # type: Optional[bool]
    taken = []  # type: List[str]
    for i, arg in enumerate(argv[1:], 1):
        if arg == "--" + QUANT_OFF:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.startswith("-"):
                value = True
                taken.append(arg)
            elif nxt in ("True", "False"):
                value = nxt == "True"
                taken.extend([arg, nxt])
        elif arg.startswith("--%s=" % QUANT_OFF) and arg.split("=", 1)[1] in ("True", "False"):
            value = arg.split("=", 1)[1] == "True"
            taken.append(arg)
    for arg in taken:
        argv.remove(arg)
    return value


nndct_quant_off = _Option(QUANT_OFF, bool(_from_argv(sys.argv)))


def set_option_value(name: str, value: bool) -> None:
    """Set nndct option ``name`` (``"nndct_quant_off"``, the one the drop-in has) to ``value`` for the
    quantizers made after it, as ``option_util.set_option_value`` does.

    Raises:
        ValueError: another option name, or a value that is no bool."""
    if name != QUANT_OFF or not isinstance(value, bool):
        raise ValueError("set_option_value: the drop-in has the option %r (a bool) only, got %r=%r"
                         % (QUANT_OFF, name, value))
    nndct_quant_off.value = value
