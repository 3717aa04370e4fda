"""jax's ``jnp.fft`` lowered for the CPU and for CUDA, run by heron on the interpreter.

jax emits HLO's ``fft`` instruction for every ``jnp.fft`` function on every
platform (XLA:GPU runs it as cuFFT, XLA:CPU as ducc). heron's
``fft-rewriter`` makes it the library call ``__heron$fft``, which the
interpreter runs on the host (numpy's pocketfft in double precision, rounded
once). Each function here is lowered by jax, compiled by heron for the
interpreter, run by the thunk executor and compared with ``jax.jit`` on the
CPU: f32 and f64 (jax_enable_x64), batched, odd and even lengths, one to three
transformed dimensions.

Tolerance: an FFT sums in an order of its own, so the difference is measured
relative to the largest magnitude of jax's result, allowed ``4 * eps *
log2(N)`` (N the transform's size, at least 2). Measured: at most 1.3 eps for
f32 and 1.6 eps for f64 (irfftn, N = 126) -- the host's transform is within half an
ulp of exact, so what remains is ducc's own rounding.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64
from heron_test_support.jax_runs import run_on_heron

from heron.compiler import Target
from heron.compiler.executable import compile_executable
from heron.jax.devices import open_device
from heron.jax.lowering import lower
from heron.runtime.core.thunks import LibraryCallThunk


@pytest.fixture(autouse=True)
def x64():
    """f64 needs jax_enable_x64 (a global other suites set either way)."""
    with jax_x64(True):
        yield


@pytest.fixture(scope="module")
def device():
    return open_device("interpreter")[1]


def _close(actual, expected, size: int) -> float:
    """The difference relative to the largest magnitude, in eps; asserted within
    ``4 log2(size)`` eps (see the module docstring)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    eps = np.finfo(expected.dtype).eps
    scale = float(np.max(np.abs(expected), initial=0.0)) or 1.0
    error = float(np.max(np.abs(actual - expected), initial=0.0)) / scale / eps
    assert error <= 4 * max(1.0, math.log2(size)), f"{error:.1f} eps"
    return error


#: name -> (function of a real operand [3, 6, 7], the size of its transform)
FUNCTIONS = {
    "fft": (lambda a: jnp.fft.fft(a), 7),
    "ifft": (lambda a: jnp.fft.ifft(a * (1 + 2j)), 7),
    "fft_n_even": (lambda a: jnp.fft.fft(a, n=8), 8),  # padded to 8
    "rfft": (jnp.fft.rfft, 7),
    "irfft_odd": (lambda a: jnp.fft.irfft(jnp.fft.rfft(a), n=7), 7),
    "irfft_even": (lambda a: jnp.fft.irfft(a + 1j * a, n=12), 12),
    "fft2": (jnp.fft.fft2, 42),
    "ifft2": (lambda a: jnp.fft.ifft2(a - 0.5j), 42),
    "fftn": (jnp.fft.fftn, 126),
    "rfftn": (jnp.fft.rfftn, 126),
    "rfft2_axes": (lambda a: jnp.fft.rfft2(a, axes=(0, 2)), 21),  # jax transposes around it
    "irfftn": (lambda a: jnp.fft.irfftn(jnp.fft.rfftn(a), s=a.shape), 126),
    "fftshift_of_rfft": (lambda a: jnp.fft.fftshift(jnp.abs(jnp.fft.rfft(a, axis=1))), 6),
}


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_jnp_fft_equals_jax_on_the_cpu(device, name, dtype, platform):
    function, size = FUNCTIONS[name]
    x = np.random.default_rng(7).standard_normal((3, 6, 7)).astype(dtype)
    expected = jax.jit(function)(x)
    _close(run_on_heron(device, platform, function, x, expect_in_hlo=" fft("), expected, size)


def test_a_complex_operand_and_a_round_trip(device):
    rng = np.random.default_rng(3)
    z = (rng.standard_normal((2, 5, 9)) + 1j * rng.standard_normal((2, 5, 9))).astype(np.complex64)

    def function(a):
        return jnp.fft.ifftn(jnp.fft.fftn(a, axes=(1, 2)), axes=(1, 2)), jnp.fft.fft(a, axis=1)

    got = run_on_heron(device, "cuda", function, z, expect_in_hlo=" fft(")
    want = jax.jit(function)(z)
    _close(got[0], want[0], 45)
    _close(got[1], want[1], 5)
    np.testing.assert_allclose(got[0], z, atol=1e-5)  # the round trip: IFFT normalised by 1/N


def test_the_compiled_program_calls_heron_s_fft(device):
    x = np.ones((4, 8), np.float32)
    lowered = lower(jnp.fft.rfft, x, platform="cuda")
    artefact = compile_executable(lowered.module, Target.preset("h100"), ("interpreter",))
    (call,) = [thunk for thunk in artefact.program if isinstance(thunk, LibraryCallThunk)]
    assert call.operation == "fft" and dict(call.attributes)["fft_type"] == "RFFT"
    (host,) = call.fallback  # where no FFT library is, the host call runs
    assert host.target == "__heron$fft"


WITH_FFT = """\
HloModule jit_fft

ENTRY main {
  a = f32[2,6,5]{2,1,0} parameter(0)
  t = f32[2,6,5]{2,1,0} tanh(a)
  r = c64[2,6,3]{2,1,0} fft(t), fft_type=RFFT, fft_length={6,5}
  ROOT i = f32[2,6,5]{2,1,0} fft(r), fft_type=IRFFT, fft_length={6,5}
}
"""


def test_heron_run_checks_an_fft_program_against_the_evaluator(hlo, capsys):
    from heron.cli.main import main

    code = main(["run", hlo(WITH_FFT), "--backend", "interpreter", "--check"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), out
    assert "check against the reference evaluator" in out
    assert "agree: every output within the tolerance" in out
