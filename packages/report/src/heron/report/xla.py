"""The ``heron xla`` comparison for the page, when XLA:GPU is installed (optional).

``heron.xla_compare`` (the ``heron[xla]`` extra) compiles the module with
XLA:GPU deviceless and with heron, kernel beside kernel; its text is what
``heron xla`` prints. Absent, or XLA absent, the page says so instead.
"""

from __future__ import annotations

from heron.hlo.ir import Module
from heron.target import Target

__all__ = ["compare_with_xla"]


def compare_with_xla(module: Module, source: str, target: Target) -> tuple[str | None, str | None]:
    """(the comparison's text, None), or (None, why there is none)."""
    try:
        from heron.xla_compare import TARGETS, XlaNotInstalledError, find_xla
        from heron.xla_compare.compare import compare_module
        from heron.xla_compare.report import format_comparison
    except ImportError as exc:
        return None, (
            "the XLA:GPU comparison is not installed: pip install 'heron[xla]' (from a"
            " checkout: uv pip install -e '.[xla]', or pip install -r local-packages.txt -e"
            f" '.[xla]'; {exc.name or exc} is missing)"
        )
    if target.name not in TARGETS:
        return None, (
            f"no XLA target spec for {target.name} (heron xla compares on {', '.join(TARGETS)})"
        )
    try:
        installation = find_xla()
    except XlaNotInstalledError as exc:
        return None, str(exc)
    comparison = compare_module(module, source or module.name, target.name, None, installation)
    if comparison.xla_error:
        return None, f"XLA:GPU failed on this module: {comparison.xla_error.splitlines()[0]}"
    return format_comparison(comparison), None
