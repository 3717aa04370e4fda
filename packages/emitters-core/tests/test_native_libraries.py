"""MLIR's bindings deep-bound where TensorFlow's LLVM is loaded (heron.emitters.native_libraries).

The sixteenth sweep: ``import tensorflow`` (or neural_tangents, which imports it) before
``heron.jax.jit`` made heron's first compile die of a segmentation fault, MLIR's
libraries bound to TensorFlow's global LLVM symbols."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not hasattr(os, "RTLD_DEEPBIND"), reason="RTLD_DEEPBIND is glibc's (Linux only)"
)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600
    )


def test_the_bindings_are_deep_bound_where_a_clashing_module_is_loaded():
    done = _run(
        """
        import os, sys, types
        sys.modules["tensorflow"] = types.ModuleType("tensorflow")  # its name is what counts
        seen = []
        set_flags = sys.setdlopenflags
        sys.setdlopenflags = lambda flags: (seen.append(flags), set_flags(flags))[1]
        import heron.emitters
        assert "mlir.ir" in sys.modules
        assert seen and seen[0] & os.RTLD_DEEPBIND, seen
        assert not sys.getdlopenflags() & os.RTLD_DEEPBIND  # restored
        """
    )
    assert done.returncode == 0, done.stderr


def test_without_one_the_bindings_load_as_they_would():
    done = _run(
        """
        import sys
        seen = []
        sys.setdlopenflags = lambda flags: seen.append(flags)
        import heron.emitters
        from heron.emitters.native_libraries import load_mlir_bindings
        assert not seen and not load_mlir_bindings()
        """
    )
    assert done.returncode == 0, done.stderr


def test_heron_compiles_after_tensorflow():
    pytest.importorskip("tensorflow")
    done = _run(
        """
        import tensorflow
        import jax.numpy as jnp
        import heron.jax
        print(heron.jax.jit(lambda x: jnp.sin(x) * 2, backend="interpreter")(jnp.arange(4.0)))
        """
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
