"""GEMM operands in a layout the library reads (XLA:GPU's layout constraints on dots).

heron's layout assignment makes a transpose before a dot free where it can, by
giving its result the operand's order; the library cannot read a batched
operand whose batch dimension is then the most minor (flax's MoE dispatch:
``f32[4,8,8]{0,2,1}``). Such an operand is copied into row-major order (a
kernel of its own) and the dot stays a library call; a column-major matrix is
read transposed, with no copy.
"""

from __future__ import annotations

import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.library_gemm import dot_fusion_verdicts
from heron.compiler.library_gemm_layout import operand_reading
from heron.hlo.element_types import ElementType
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.shapes import ArrayShape, Layout
from heron.runtime.core.executor import load_executable
from heron.runtime.core.gemm import GemmCall
from heron.runtime.core.thunks import KernelThunk, LibraryCallThunk, walk
from heron.runtime.interpreter import InterpreterDevice

H100 = Target.preset("h100")

#: x f32[8,8,4] -> its [4,8,8] transpose, the batch (4) minor once the transpose is free
BATCH_MINOR = """
HloModule moe_dispatch

ENTRY main {
  x = f32[8,8,4]{2,1,0} parameter(0)
  w = f32[4,8,16]{2,1,0} parameter(1)
  m = f32[8,8,4]{2,1,0} multiply(x, x)
  t = f32[4,8,8]{0,2,1} transpose(m), dimensions={2,0,1}
  ROOT d = f32[4,8,16]{2,1,0} dot(t, w), lhs_batch_dims={0}, rhs_batch_dims={0},
    lhs_contracting_dims={2}, rhs_contracting_dims={1}
}
"""

#: a column-major [16,32] weight: the library reads it transposed, no copy
COLUMN_MAJOR = """
HloModule column_major

ENTRY main {
  x = f32[8,16]{1,0} parameter(0)
  w = f32[16,32]{0,1} parameter(1)
  ROOT d = f32[8,32]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


@pytest.mark.parametrize(
    "dims, minor_to_major, batch, reading",
    [
        ((4, 8), (1, 0), 0, "row-major"),
        ((4, 8), (0, 1), 0, "transposed"),
        ((2, 4, 8), (1, 2, 0), 1, "transposed"),
        ((4, 8, 8), (0, 2, 1), 1, ""),  # the batch the most minor
        ((2, 8, 3), (2, 0, 1), 1, ""),  # the batch between the matrix dimensions
        ((2, 2, 4, 6), (2, 1, 3, 0), 2, ""),
    ],
)
def test_what_the_library_reads(dims, minor_to_major, batch, reading):
    shape = ArrayShape(ElementType.F32, dims, Layout(minor_to_major))
    assert operand_reading(shape, batch) == reading


def _kernels(program) -> int:
    """Kernel launches of ``program`` outside the library calls' fallbacks."""
    fallbacks = {
        id(k) for t in walk(program) if isinstance(t, LibraryCallThunk) for k in walk(t.fallback)
    }
    return sum(isinstance(t, KernelThunk) and id(t) not in fallbacks for t in walk(program))


def _compiled(text: str):
    module = parse_module(text)
    return module, compile_program(module, H100, ("interpreter",))


def _run(module, compiled, libraries):
    rng = np.random.default_rng(7)
    inputs = [
        rng.standard_normal(p.array_shape.dims).astype(np.float32) for p in module.entry.parameters
    ]
    device = InterpreterDevice(libraries=libraries)
    (out,) = load_executable(compiled.artefact, device).run(inputs)
    return np.asarray(out), np.asarray(evaluate_module(module, inputs))


@pytest.mark.parametrize("libraries", [(), ("gemm",)])
def test_an_operand_the_library_cannot_read_is_copied_and_the_dot_is_a_library_call(
    libraries,
):
    module, compiled = _compiled(BATCH_MINOR)
    verdicts = dict(dot_fusion_verdicts(compiled.module, H100))
    assert all(verdict.startswith("cublasLt") for verdict in verdicts.values()), verdicts
    thunks = list(walk(compiled.artefact.program))
    calls = [t for t in thunks if isinstance(t, LibraryCallThunk)]
    assert len(calls) == 1
    call = GemmCall.from_thunk(calls[0])
    assert (call.batch, call.m, call.n, call.k) == (4, 8, 16, 8)
    assert not call.lhs_transposed and not call.rhs_transposed
    # the copy into row-major order (with the multiply before it): one kernel
    assert _kernels(compiled.artefact.program) == 1
    out, want = _run(module, compiled, libraries)
    bound = 1e-5 if not libraries else 8 * 2.0**-11 * 8**0.5 * max(1.0, np.abs(want).max())
    np.testing.assert_allclose(out, want, rtol=0, atol=bound)


def test_a_column_major_operand_is_read_transposed_without_a_copy():
    module, compiled = _compiled(COLUMN_MAJOR)
    thunks = list(walk(compiled.artefact.program))
    (call,) = [GemmCall.from_thunk(t) for t in thunks if isinstance(t, LibraryCallThunk)]
    assert call.rhs_transposed and not call.lhs_transposed
    assert _kernels(compiled.artefact.program) == 0
    out, want = _run(module, compiled, ())
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-5)
