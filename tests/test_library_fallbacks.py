"""heron's kernel beside a GEMM library call only where a device may need it (issue 32).

A GEMM library call carried heron's own GEMM kernel as its fallback for every
backend of the executable, compiled to PTX and a cubin for CUDA too, where
cuBLASLt runs every plain real GEMM: most of a GEMM program's compile, for a
kernel that never runs (XLA's executables hold no kernel beside their cuBLAS
calls). A backend now says which calls its devices always run
(``BackendSpec.library_always_runs``); the compile leaves their kernel out of
that backend's images, keeps it for the others (the interpreter) and for the
calls the library may refuse (s8, fp8, complex, GELU's aux output), and keeps
it everywhere with ``library_fallbacks=True`` (``heron compile
--library-fallbacks``). An artefact that counted on a library names the call
and the option when a device lacks it.
"""

from __future__ import annotations

import numpy as np
import pytest
from heron_test_support.fake_cuda import FakeCuda

from heron.cli.main import main
from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.program_run import load_program
from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.parser import parse_module
from heron.runtime.core.artefact import Artefact, ArtefactError, load
from heron.runtime.core.executor import Executable, ExecutorError
from heron.runtime.core.gemm import GemmCall
from heron.runtime.core.thunks import KernelThunk, LibraryCallThunk, walk
from heron.runtime.cuda.cublaslt import always_runs
from heron.runtime.cuda.device import CudaDevice
from heron.runtime.interpreter.device import InterpreterDevice

MLP = """
HloModule mlp
ENTRY main {
  x = f32[16,32]{1,0} parameter(0)
  w = f32[32,24]{1,0} parameter(1)
  d = f32[16,24]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[16,24]{1,0} tanh(d)
}
"""

INT8 = """
HloModule int8
ENTRY main {
  x = s8[32,64]{1,0} parameter(0)
  w = s8[64,48]{1,0} parameter(1)
  ROOT d = s32[32,48]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def _calls(artefact: Artefact) -> list[LibraryCallThunk]:
    return [t for t in walk(artefact.program) if isinstance(t, LibraryCallThunk)]


def _images(artefact: Artefact) -> dict[str, set[str]]:
    images: dict[str, set[str]] = {}
    for entry in artefact.kernels:
        images.setdefault(entry.backend, set()).add(entry.key)
    return images


def _fallback_keys(call: LibraryCallThunk) -> set[str]:
    return {t.image_key for t in walk(call.fallback) if isinstance(t, KernelThunk)}


def test_a_cuda_only_compile_has_no_kernel_beside_a_plain_gemm():
    artefact = compile_program(parse_module(MLP), Target.preset("h100"), ("cuda",)).artefact
    (call,) = _calls(artefact)
    assert call.fallback == () and call.fallback_emitter == ""
    assert len(artefact.kernels) == 1  # the tanh's loop kernel alone


def test_library_fallbacks_keeps_the_kernel_for_every_backend():
    compiled = compile_program(
        parse_module(MLP), Target.preset("h100"), ("cuda", "interpreter"), library_fallbacks=True
    )
    (call,) = _calls(compiled.artefact)
    keys = _fallback_keys(call)
    assert len(keys) == 1 and call.fallback_emitter == "gemm"
    images = _images(compiled.artefact)
    assert keys <= images["cuda"] and keys <= images["interpreter"]


def test_with_the_interpreter_the_kernel_is_the_interpreter_s_only(tmp_path):
    module = parse_module(MLP)
    compiled = compile_program(module, Target.preset("h100"), ("cuda", "interpreter"))
    artefact = compiled.artefact
    (call,) = _calls(artefact)
    keys = _fallback_keys(call)
    images = _images(artefact)
    assert keys <= images["interpreter"] and not keys & images["cuda"]
    assert artefact.runs_fallback(call, "interpreter")
    assert not artefact.runs_fallback(call, "cuda")
    # The artefact survives its own verification, saved and loaded.
    path = tmp_path / "mlp.heron"
    artefact.save(path)
    loaded = load(path)
    # The interpreter runs heron's kernel beside the call, with the reference's results.
    inputs = random_arguments(module)
    (out,) = Executable(loaded, InterpreterDevice()).run(inputs)
    expected = evaluate_module(module, inputs)
    np.testing.assert_allclose(out, expected, rtol=2e-3, atol=1e-5)  # tf32 on the device


def test_a_call_the_library_may_refuse_keeps_its_cuda_kernel():
    artefact = compile_program(parse_module(INT8), Target.preset("h100"), ("cuda",)).artefact
    (call,) = _calls(artefact)
    assert call.attribute("lhs_type") == "s8"  # cuBLASLt's IMMA kernels take some layouts
    keys = _fallback_keys(call)
    assert keys and keys <= _images(artefact)["cuda"]


def _stand_in_device(driver: FakeCuda, artefact: Artefact) -> CudaDevice:
    for thunk in walk(artefact.program):  # the cubins' parameters, as a driver reads them
        if isinstance(thunk, KernelThunk):
            driver.param_info[thunk.kernel_name] = [(8 * k, 8) for k in range(len(thunk.arguments))]
    return CudaDevice(bindings=driver)  # the stand-in driver has no cuBLASLt


def test_a_device_without_the_library_names_the_call_and_the_option():
    artefact = compile_program(parse_module(MLP), Target.preset("h100"), ("cuda",)).artefact
    with pytest.raises(ExecutorError) as error:
        Executable(artefact, _stand_in_device(FakeCuda(), artefact))
    message = str(error.value)
    assert "library call blas.gemm (gemm f32[16x32] x f32[32x24] -> f32, tf32)" in message
    assert "no heron kernel beside it" in message and "--library-fallbacks" in message


def test_a_fallback_compiled_for_other_backends_says_so():
    artefact = compile_program(
        parse_module(MLP), Target.preset("h100"), ("cuda", "interpreter")
    ).artefact
    with pytest.raises(ExecutorError) as error:
        Executable(artefact, _stand_in_device(FakeCuda(), artefact))
    assert "beside it for other backends only" in str(error.value)
    assert "--library-fallbacks" in str(error.value)


def test_a_compile_for_the_device_at_hand_keeps_what_it_needs():
    """``heron run`` compiles for the device it runs on: a CUDA device without cuBLASLt
    gets heron's kernel beside the call, and runs it."""
    module = parse_module(MLP)
    device = CudaDevice(bindings=FakeCuda())
    loaded = load_program(module, device, "cuda", target=Target.preset("h100"))
    (call,) = _calls(loaded.compiled.artefact)
    assert _fallback_keys(call) <= _images(loaded.compiled.artefact)["cuda"]
    (choice,) = loaded.executable.library_choices
    assert (choice.chosen, choice.library) == ("gemm", False)


def test_a_kernel_outside_a_library_call_still_needs_every_image():
    artefact = compile_program(
        parse_module(MLP), Target.preset("h100"), ("cuda", "interpreter"), library_fallbacks=True
    ).artefact
    (loop,) = [t for t in artefact.program if isinstance(t, KernelThunk)]
    kept = [e for e in artefact.kernels if not (e.backend == "cuda" and e.key == loop.image_key)]
    with pytest.raises(ArtefactError, match="which backend 'cuda' lacks"):
        Artefact(
            target=artefact.target,
            program=artefact.program,
            allocations=artefact.allocations,
            signature=artefact.signature,
            kernels=kept,
            constants=artefact.constants,
        )


def test_heron_compile_prints_the_images_per_backend(capsys, hlo, tmp_path):
    out = tmp_path / "mlp.heron"
    assert main(["compile", hlo(MLP), "--executable", str(out)]) == 0
    assert "images: cuda 1, interpreter 2" in capsys.readouterr().out
    assert main(["compile", hlo(MLP), "--executable", str(out), "--library-fallbacks"]) == 0
    assert "images: cuda 2, interpreter 2" in capsys.readouterr().out


def _gemm(**fields) -> GemmCall:
    return GemmCall(**{"batch": 1, "m": 16, "n": 24, "k": 32, **fields})


@pytest.mark.parametrize(
    ("fields", "runs"),
    [
        ({}, True),
        ({"compute": "tf32"}, True),
        ({"lhs_type": "bf16", "rhs_type": "bf16", "out_type": "bf16", "bias": True}, True),
        ({"lhs_type": "f16", "rhs_type": "f16", "out_type": "f16", "activation": "gelu"}, True),
        ({"lhs_type": "f64", "rhs_type": "f64", "out_type": "f64"}, True),
        ({"n": 24, "activation": "gelu", "aux": True}, False),  # GELU_AUX's ld rule
        ({"lhs_type": "s8", "rhs_type": "s8", "out_type": "s32"}, False),  # IMMA layouts
        ({"lhs_type": "c64", "rhs_type": "c64", "out_type": "c64"}, True),
        (
            {
                "lhs_type": "c128",
                "rhs_type": "c128",
                "out_type": "c128",
                "alpha_imag": 2.0,
                "beta": 1.0,
                "residual": True,
            },
            True,
        ),
        (
            {"lhs_type": "f8e4m3fn", "rhs_type": "f8e4m3fn", "out_type": "bf16"},
            False,
        ),
    ],
)
def test_what_cublaslt_always_runs(fields, runs):
    assert always_runs(_gemm(**fields)) is runs


def test_always_runs_refuses_what_is_no_gemm():
    assert always_runs(object()) is False
