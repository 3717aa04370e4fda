"""HLO's fft runs as heron's library call ``__heron$fft``.

No emitter computes the op: the ``fft-rewriter`` pass makes it a custom call
(as XLA:GPU makes it a cuFFT plan), carrying ``fft_type`` and ``fft_length``,
whose host implementation is the op's meaning (numpy's FFT in double
precision, rounded once), also the reference evaluator's; a compiled program
computes it on the interpreter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.library_fft import fft_call, is_library_fft, rewrite_ffts
from heron.hlo.custom_calls.call import CustomCall, CustomCallError
from heron.hlo.custom_calls.fft import TARGET, backend_config, host, transform
from heron.hlo.errors import HloError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.shapes import TupleShape
from heron.runtime.core.fft import FftCall

MODULE = """HloModule fft
ENTRY main {{
  a = {operand} parameter(0)
  ROOT r = {result} fft(a), fft_type={kind}, fft_length={{{length}}}
}}
"""

#: (fft_type, operand, result, fft_length, numpy's transform of the operand)
CASES = {
    "fft": ("FFT", "c64[2,3,5]", "c64[2,3,5]", "5", lambda x: np.fft.fft(x)),
    "ifft2": ("IFFT", "c128[2,3,5]", "c128[2,3,5]", "3,5", lambda x: np.fft.ifft2(x)),
    "fft3": ("FFT", "c64[2,3,5]", "c64[2,3,5]", "2,3,5", lambda x: np.fft.fftn(x)),
    "rfft": ("RFFT", "f32[2,3,6]", "c64[2,3,4]", "6", lambda x: np.fft.rfft(x)),
    "rfft2": ("RFFT", "f64[2,3,5]", "c128[2,3,3]", "3,5", lambda x: np.fft.rfft2(x)),
    "irfft_odd": ("IRFFT", "c64[2,3,4]", "f32[2,3,7]", "7", lambda x: np.fft.irfft(x, 7)),
    "irfft_even": ("IRFFT", "c128[2,3,4]", "f64[2,3,6]", "6", lambda x: np.fft.irfft(x, 6)),
    "irfft2": ("IRFFT", "c64[2,3,3]", "f32[2,3,5]", "3,5", lambda x: np.fft.irfft2(x, (3, 5))),
}


def _text(name: str) -> str:
    kind, operand, result, length, _ = CASES[name]
    return MODULE.format(operand=operand, result=result, kind=kind, length=length)


def _operand(name: str) -> np.ndarray:
    module = parse_module(_text(name))
    shape = module.entry.parameters[0].shape
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape.dims)
    if shape.element_type.is_complex:
        x = x + 1j * rng.standard_normal(shape.dims)
    return x.astype(shape.element_type.numpy_dtype)


def _close(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal to numpy's transform within 4 eps of the result's type, relative to its largest
    magnitude (both are within an ulp or two of exact)."""
    assert actual.dtype == np.result_type(actual.dtype) and actual.shape == expected.shape
    eps = np.finfo(actual.dtype).eps
    scale = float(np.max(np.abs(expected)))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=4 * eps * scale)


def test_the_pass_makes_every_fft_the_library_call():
    module = parse_module(_text("irfft2"))
    assert rewrite_ffts(module)
    root = module.entry.root
    assert is_library_fft(root) and root.attributes["custom_call_target"].text == TARGET
    assert root.attributes["backend_config"].text == backend_config("IRFFT", (3, 5))
    assert str(root.shape) == str(parse_module(_text("irfft2")).entry.root.shape)
    assert not rewrite_ffts(module)  # nothing left to rewrite


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_call_and_the_evaluator_compute_numpy_s_transform(name):
    kind, _, result, length, expected_of = CASES[name]
    x = _operand(name)
    expected = expected_of(x)
    call = CustomCall(TARGET, "r", "main", (), TupleShape(()), backend_config=backend_config(
        kind, [int(n) for n in length.split(",")]))  # fmt: skip
    got = host((x,), call)
    assert got.dtype == parse_module(_text(name)).entry.root.shape.element_type.numpy_dtype
    _close(got, expected.astype(got.dtype))
    evaluated = evaluate_module(parse_module(_text(name)), [x])
    np.testing.assert_array_equal(evaluated, got)  # one meaning, computed one way


@pytest.mark.parametrize("name", ["rfft", "irfft_odd", "fft3", "ifft2"])
def test_a_compiled_program_transforms_on_the_interpreter(name):
    from heron.runtime.core.executor import load_executable
    from heron.runtime.core.registry import default_backends

    module = parse_module(_text(name))
    program = compile_program(module, Target.preset("h100"), ("interpreter",))
    device = default_backends().create_device("interpreter")
    executable = load_executable(program.artefact, device, "interpreter")
    x = _operand(name)
    (got,) = executable.run([x])
    np.testing.assert_array_equal(got, evaluate_module(parse_module(_text(name)), [x]))


def test_irfft_ignores_the_imaginary_parts_a_real_signal_cannot_have():
    # c2r: the zero frequency's and (even length) the Nyquist frequency's imaginary parts
    x = np.fft.rfft(np.random.default_rng(1).standard_normal(6))
    noisy = x + 1j * np.array([5.0, 0, 0, 7.0])
    np.testing.assert_allclose(transform(noisy, "IRFFT", (6,)), np.fft.irfft(x, 6), atol=1e-14)


def test_an_empty_transform_is_zeros_of_the_result_shape():
    got = transform(np.zeros((2, 0), np.complex64), "IRFFT", (0,))
    assert got.shape == (2, 0) and got.dtype == np.float32


@pytest.mark.parametrize(
    ("config", "operand", "match"),
    [
        ('{"fft_type": "DCT", "fft_length": [4]}', np.zeros(4, np.complex64), "fft_type"),
        ('{"fft_type": "FFT", "fft_length": [1, 2, 3, 4]}', np.zeros(4, np.complex64), "1 to 3"),
        ('{"fft_type": "FFT"', np.zeros(4, np.complex64), "not JSON"),
        ('{"fft_type": "FFT", "fft_length": [4]}', np.zeros(4, np.float32), "c64 or c128"),
        ('{"fft_type": "RFFT", "fft_length": [4]}', np.zeros(4, np.float16), "f32 or f64"),
        ('{"fft_type": "FFT", "fft_length": [8]}', np.zeros(4, np.complex64), r"\[8\], not \[4\]"),
        ('{"fft_type": "IRFFT", "fft_length": [8]}', np.zeros(4, np.complex64), r"\[5\]"),
    ],
)
def test_what_the_op_does_not_take_is_refused_by_name(config, operand, match):
    call = CustomCall(TARGET, "r", "main", (), TupleShape(()), backend_config=config)
    with pytest.raises(CustomCallError, match=rf"custom-call 'r'.*__heron\$fft.*{match}"):
        host((operand,), call)


def test_the_evaluator_refuses_an_fft_that_does_not_fit_its_operand():
    module = parse_module(_text("fft"))
    module.entry.root.attributes["fft_length"] = (4,)
    with pytest.raises(HloError, match=r"fft 'r'.*FFT of fft_length=\[4\]"):
        evaluate_module(module, [_operand("fft")])


@pytest.mark.parametrize("name", ["rfft2", "irfft_odd", "irfft2", "fft3", "ifft2"])
@pytest.mark.parametrize("libraries", [(), ("fft",)], ids=["host", "numpy-library"])
def test_the_library_call_or_its_host_fallback_computes_the_op(name, libraries):
    """A compiled fft is one library call with the host call beside it: a device with an
    FFT library runs the call's contract (the interpreter's numpy reference on the raw
    bytes), any other the host call; both equal the evaluator."""
    from heron.runtime.core.executor import load_executable
    from heron.runtime.core.thunks import LibraryCallThunk
    from heron.runtime.interpreter import InterpreterDevice

    program = compile_program(parse_module(_text(name)), Target.preset("h100"), ("interpreter",))
    (call,) = [t for t in program.artefact.program if isinstance(t, LibraryCallThunk)]
    contract = FftCall.from_thunk(call)
    kind, operand, _, length, _ = CASES[name]
    assert (contract.fft_type, contract.fft_length, contract.batch) == (
        kind,
        tuple(int(n) for n in length.split(",")),
        math.prod(parse_module(_text(name)).entry.parameters[0].shape.dims)
        // math.prod(contract.operand_dims),
    )
    device = InterpreterDevice(libraries=libraries)
    executable = load_executable(program.artefact, device)
    x = _operand(name)
    (got,) = executable.run([x])
    assert device.library_calls == len(libraries)
    np.testing.assert_array_equal(got, evaluate_module(parse_module(_text(name)), [x]))


def test_a_call_whose_operand_is_not_row_major_stays_a_host_call():
    module = parse_module(
        _text("fft").replace("c64[2,3,5] parameter", "c64[2,3,5]{1,2,0} parameter")
    )
    rewrite_ffts(module)
    assert fft_call(module.entry.root) is None
    row_major = parse_module(_text("fft"))
    rewrite_ffts(row_major)
    assert fft_call(row_major.entry.root) == FftCall("FFT", (5,), 6, "c64")


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (("DCT", (4,), 1, "c64"), "fft_type"),
        (("RFFT", (4,), 1, "c64"), "RFFT takes f32 or f64, not c64"),
        (("FFT", (4, 4, 4, 4), 1, "c64"), "1 to 3 lengths"),
        (("FFT", (4,), 0, "c64"), "a batch of 0"),
    ],
)
def test_the_contract_refuses_what_no_fft_is(fields, match):
    from heron.runtime.core.thunks import ThunkError

    with pytest.raises((ThunkError, ValueError), match=match):
        FftCall(*fields)


def test_the_contract_s_sizes_and_description():
    call = FftCall("IRFFT", (3, 8), 2, "c128")
    assert call.operand_dims == (3, 5) and call.out_dims == (3, 8)
    assert call.byte_sizes() == (2 * 15 * 16, 2 * 24 * 8)
    assert call.describe() == "fft IRFFT [3x8] x 2 c128 -> f64"
    assert FftCall.from_attributes(call.attributes()) == call
