"""MLIR's Python bindings loaded apart from another copy of LLVM in the same process.

TensorFlow loads its native library with its symbols global (``RTLD_GLOBAL``), LLVM's and
MLIR's among them; the MLIR bindings heron uses, loaded after it, then bound some of
their calls to TensorFlow's copy of a different LLVM, and the first compile died of a
segmentation fault (the sixteenth sweep: neural-tangents imports TensorFlow on import,
and so do some of pytensor's JAX dispatches). Loaded with ``RTLD_DEEPBIND``, the
bindings' libraries look up their own symbols first. Only where such a library is loaded
already: deep binding is glibc's, and against a runtime of its own it has costs too.
"""

from __future__ import annotations

import os
import sys

__all__ = ["CLASHING_MODULES", "load_mlir_bindings"]

#: Modules whose native libraries put another LLVM's symbols in the global scope.
CLASHING_MODULES = ("tensorflow",)


def load_mlir_bindings() -> bool:
    """Import ``mlir.ir`` with its libraries deep-bound if a module of
    :data:`CLASHING_MODULES` is loaded and the bindings are not yet; whether it did."""
    deep = getattr(os, "RTLD_DEEPBIND", None)
    if deep is None or "mlir.ir" in sys.modules:
        return False
    if not any(name in sys.modules for name in CLASHING_MODULES):
        return False
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | deep)
    try:
        import mlir.ir  # noqa: F401
    finally:
        sys.setdlopenflags(flags)
    return True
