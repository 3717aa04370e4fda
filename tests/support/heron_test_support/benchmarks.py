"""Benchmark scripts loaded as modules, as their tests call their ``main``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["load_benchmark"]


def load_benchmark(script: Path) -> ModuleType:
    """``script`` (a ``benchmarks/*.py``) loaded as a module, its folder importable while it
    loads, as when it runs (its ``benchlib`` imports)."""
    sys.path.insert(0, str(script.parent))
    try:
        spec = importlib.util.spec_from_file_location(script.stem, script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(script.parent))
    return module
