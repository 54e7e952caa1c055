"""The skip rules of the ``vitis_ai`` and ``cuda`` markers (the shared helpers are in tests/support/__init__.py)."""
import importlib.util

import pytest


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``vitis_ai`` run only where pytorch_nndct imports (inside the Vitis AI image), tests marked
    ``cuda`` only where torch sees a CUDA GPU."""
    rules = []
    if importlib.util.find_spec("pytorch_nndct") is None:
        rules.append(("vitis_ai", "pytorch_nndct not importable: runs inside the Vitis AI image"))
    if any("cuda" in item.keywords for item in items) and not _cuda():
        rules.append(("cuda", "no CUDA GPU here (torch.cuda.is_available() is False): runs on a machine with one"))
    for marker, reason in rules:
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
