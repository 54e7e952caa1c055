"""The per-layer sensitivity row: one quantized point against the float model (typed, backend-neutral).

The sim computes the rows (``pipeline.quantizers.sim.sensitivity.layer_sensitivity``, through
``pipeline.sensitivity`` for either backend's calibration); the test step
stores them in ``steps/test.json`` (:meth:`LayerSensitivity.to_json`), the report and the plots
read them back (:meth:`LayerSensitivity.of`). Importing this module imports no backend.
"""
import math
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional, Union


@dataclass
class LayerSensitivity:
    """One quantized point of the test-mode model compared with its float twin over the eval data.

    Attributes:
        node: nndct node name (``"nndct_relu_2"``); op: its nndct op type.
        float_node: name of the float model's fx node compared with it (``"relu1"``, ``"bn1"``,
            ``"add"``); float_target: its module path (``"layer1.0.relu"``) or function/method
            name (``"add"``), ``"input"`` for the placeholder.
        fix_pos, bitwidth: from quant_info.
        shape: per-sample output shape (batch axis left out); elements: values compared over all batches.
        sqnr_db: ``10 log10(sum f^2 / sum (f - q)^2)`` in dB, float64 sums over every value of
            every batch (f float, q simulated, float model scale); ``inf`` when f == q everywhere,
            ``-inf`` when f is all zero and q is not.
        cosine: ``sum f q / sqrt(sum f^2 sum q^2)`` over all values as one vector; 1.0 when
            f == q everywhere, 0.0 when exactly one of them is all zero.
        float_min, float_max: the float values' range (float model scale).
        graph_min, graph_max: the same values in the quantized graph's scale (divided by the CLE
            scale per channel; equal to ``float_*`` where CLE does not rescale).
        range_min, range_max: what the fix_pos represents, ``-2**(b-1) * 2**-p`` and
            ``(2**(b-1) - 1) * 2**-p`` (-128 * 2^-p .. 127 * 2^-p for 8 bits; docs/arithmetic.md#number-format).
        clipped_fraction: the fraction of float values (graph scale) that the fix_pos saturates:
            ``x * 2**p >= 2**(b-1) - 0.5`` or ``< -2**(b-1) - 0.5``, the values whose half_up code
            falls outside the code range (``fixpoint.fake_quant``).
        cle_rescaled: True between the convs of a CLE pair (``pipeline.quantizers.sim.sensitivity``);
            cle_scale: ``[min s, max s]`` there, else None.
        notes: strings (CLE, a float op that runs differently in the quantized model, a point the
            test-mode model leaves unquantized, a float range so small that every value quantizes
            to 0, as when the fix_pos cap of 12 is reached; docs/arithmetic.md#fix-position-cap).

    Floats are Python floats and may be non-finite (``inf`` SQNR); :meth:`to_json` writes them as
    strings. ``row[key]`` reads the field ``key`` (the JSON key), as the report's tables do.
    """

    node: str
    float_node: str
    float_target: str
    op: str
    fix_pos: int
    bitwidth: int
    shape: Optional[List[int]]
    elements: int
    sqnr_db: float
    cosine: float
    float_min: float
    float_max: float
    graph_min: float
    graph_max: float
    range_min: float
    range_max: float
    clipped_fraction: float
    cle_rescaled: bool
    cle_scale: Optional[List[float]]
    notes: List[str]

    def __getitem__(self, key: str) -> Any:
        """The field ``key``. Raises KeyError for a name that is not a field."""
        if key not in ROW_KEYS:
            raise KeyError(key)
        return getattr(self, key)

    @property
    def float_name(self) -> str:
        """The float side for people: the module path when the fx node is a module call
        (``"layer1.0.relu"`` for fx node ``layer1_0_relu``), else the fx node name (``"add_1"``, ``"x"``)."""
        return self.float_target if self.float_target.replace(".", "_") == self.float_node else self.float_node

    def to_json(self) -> Dict[str, Any]:
        """A new dict for strict JSON, keys in ``ROW_KEYS`` order: non-finite floats (also inside
        lists) become the strings ``"inf"``, ``"-inf"``, ``"nan"`` (Python's json would write the
        non-standard ``Infinity``); lists are copies."""
        return {k: _json_value(getattr(self, k)) for k in ROW_KEYS}

    @classmethod
    def from_json(cls, row: Dict[str, Any]) -> "LayerSensitivity":
        """The inverse of :meth:`to_json`: the ``"inf"``, ``"-inf"``, ``"nan"`` strings of the float
        fields (``FLOAT_KEYS``) back to floats; floats pass through unchanged. ``row`` is not modified.

        Raises:
            TypeError: a key of ``ROW_KEYS`` missing or an unknown key.
        """
        return cls(**{k: _float_value(v) if k in FLOAT_KEYS else v for k, v in row.items()})

    @classmethod
    def of(cls, row: Union["LayerSensitivity", Dict[str, Any]]) -> "LayerSensitivity":
        """``row`` itself when it is one, else :meth:`from_json` of the dict (a row as stored or as
        ``to_json`` wrote it)."""
        return row if isinstance(row, cls) else cls.from_json(row)


# the keys of a row, in this order (the fields; steps/test.json writes them so)
ROW_KEYS = tuple(f.name for f in fields(LayerSensitivity))
# the row fields that hold floats that may be non-finite
FLOAT_KEYS = ("sqnr_db", "cosine", "float_min", "float_max", "graph_min", "graph_max")


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, list):
        return [_json_value(x) for x in v]
    return v


def _float_value(v: Any) -> Any:
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    return v
