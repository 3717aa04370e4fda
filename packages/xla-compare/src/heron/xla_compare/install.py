"""Where XLA:GPU is: a Python with jaxlib and the jax CUDA PJRT plugin.

In order: ``$HERON_XLA_PYTHON`` (a Python executable that has them, e.g. a
separate virtual environment), else this Python when ``jaxlib`` and
``jax_plugins.xla_cuda13`` import here (``pip install 'heron[xla]'``).
``$HERON_XLA_PLUGIN`` names another ``xla_cuda_plugin.so`` (a newer
jax-cuda13-pjrt unpacked beside an older jaxlib); the worker reads it too.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

PYTHON_ENV = "HERON_XLA_PYTHON"
PLUGIN_ENV = "HERON_XLA_PLUGIN"
INSTALL_HINT = (
    "XLA:GPU is not installed: pip install 'heron[xla]' (jaxlib and the jax CUDA PJRT"
    " plugin; from a checkout: uv pip install -e '.[xla]', or pip install -r"
    " local-packages.txt -e '.[xla]'), or set"
    f" {PYTHON_ENV} to a Python that has them"
)


class XlaNotInstalledError(RuntimeError):
    """No Python with jaxlib and the XLA CUDA plugin was found; the message says how to install."""


@dataclass(frozen=True)
class XlaInstallation:
    """The Python that runs :mod:`heron.xla_compare.worker`, and an optional plugin override."""

    python: str
    plugin: str | None = None

    @property
    def worker(self) -> Path:
        return Path(__file__).with_name("worker.py")


def _importable_here() -> bool:
    try:
        return (
            importlib.util.find_spec("jaxlib") is not None
            and importlib.util.find_spec("jax_plugins.xla_cuda13") is not None
        )
    except (ImportError, ValueError):
        return False


def find_xla(environ: dict[str, str] | None = None) -> XlaInstallation:
    """The XLA installation to use; XlaNotInstalledError (with INSTALL_HINT) when none is."""
    environ = os.environ if environ is None else environ
    plugin = environ.get(PLUGIN_ENV) or None
    python = environ.get(PYTHON_ENV)
    if python:
        if not Path(python).is_file() or not os.access(python, os.X_OK):
            raise XlaNotInstalledError(f"{PYTHON_ENV}={python}: not an executable; {INSTALL_HINT}")
        return XlaInstallation(python, plugin)
    if plugin and importlib.util.find_spec("jaxlib") is not None:
        return XlaInstallation(sys.executable, plugin)
    if _importable_here():
        return XlaInstallation(sys.executable, plugin)
    raise XlaNotInstalledError(INSTALL_HINT)
