"""``--nndct_quant_off`` as the drop-in reads it from the command line (pipeline/apis/options.py), the way
pytorch_nndct's ``add_valid_nndct_option`` reads it when imported, and its explicit switch."""
import pytest

from pipeline.apis import options


@pytest.mark.parametrize("argv, value, left", [
    (["s.py", "--nndct_quant_off"], True, ["s.py"]),
    (["s.py", "--nndct_quant_off", "--other"], True, ["s.py", "--other"]),
    (["s.py", "--nndct_quant_off", "False"], False, ["s.py"]),
    (["s.py", "--nndct_quant_off=True", "x"], True, ["s.py", "x"]),
    (["s.py", "--nndct_quant_off", "x"], None, ["s.py", "--nndct_quant_off", "x"]),  # not taken, left there
    (["s.py", "--quant_off"], None, ["s.py", "--quant_off"]),  # looked up by its attribute name only
    (["s.py"], None, ["s.py"]),
])
def test_the_flag_is_read_and_taken_off_the_command_line_as_nndct_does(argv, value, left):
    argv = list(argv)
    assert options._from_argv(argv) is value
    assert argv == left


def test_set_option_value_switches_it_for_later_quantizers():
    saved = options.nndct_quant_off.value
    try:
        options.set_option_value("nndct_quant_off", True)
        assert options.nndct_quant_off.value is True
        with pytest.raises(ValueError, match="nndct_quant_off"):
            options.set_option_value("nndct_param_corr", False)
    finally:
        options.nndct_quant_off.value = saved
