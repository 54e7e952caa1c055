"""The Vitis AI marker's skip rule (the shared helpers are in tests/support/__init__.py)."""
import importlib.util

import pytest


def pytest_collection_modifyitems(config, items):
    """Tests marked ``vitis_ai`` run only where pytorch_nndct imports (inside the Vitis AI image)."""
    if importlib.util.find_spec("pytorch_nndct") is not None:
        return
    skip = pytest.mark.skip(reason="pytorch_nndct not importable: runs inside the Vitis AI image")
    for item in items:
        if "vitis_ai" in item.keywords:
            item.add_marker(skip)
