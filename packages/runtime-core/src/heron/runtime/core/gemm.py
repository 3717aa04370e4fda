"""The GEMM library call's contract: ``operation "gemm"`` of a :class:`LibraryCallThunk`.

heron's HLO passes put every dot into XLA's canonical form
(``heron.hlo.passes.dot_decomposer``): ``lhs [batch..., M, K]`` x
``rhs [batch..., K, N]`` -> ``[batch..., M, N]``, every operand dense and
row-major (the layout normalisation makes them so). A GEMM library call is
such a dot, with what a BLAS library applies around it, as XLA's GEMM
rewriter fuses it into a cuBLASLt call::

    out[b, m, n] = activation(alpha * sum_k lhs[b, m, k] * rhs[b, k, n]
                              + beta * c[b, m, n] + bias[n])

computed in the accumulation type XLA uses for the element types (f32 for
f16, bf16, f32 and fp8 inputs; f64 for f64; c64 and c128 for themselves; s32,
wrapping, for s8), the operands
first rounded to ``compute`` where that is narrower than their type (TF32,
XLA:GPU's default for f32 dots: :mod:`heron.hlo.dot_precision`), and rounded
once to the output type.

- ``arguments`` (the thunk's slices, in this order): ``lhs`` (batch*m*k
  elements), ``rhs`` (batch*k*n), ``bias`` (n elements of the output type,
  only with ``bias``), ``c`` (batch*m*n of the output type, only with
  ``residual``), ``out`` (batch*m*n), ``aux`` (batch*m*n of the output type,
  only with ``aux``). ``out`` overlaps no operand, except
  that it may be exactly ``c`` (cuBLASLt's C = D); ``aux`` overlaps nothing.
  Without ``residual``,
  ``beta`` scales what ``out`` held before (BLAS's C = D); heron's compiler
  then emits 0. The call computes its last argument, or its last two with
  ``aux``.
- ``attributes``: ``batch``, ``m``, ``n``, ``k`` (each at least 1: a missing
  free or contracting dimension is 1, all batch dimensions flattened into one
  count), ``lhs_type``, ``rhs_type``, ``out_type`` (HLO element type names),
  ``lhs_transposed`` (``lhs`` is stored ``[batch, k, m]``: the dot read a
  transpose of it, which the library reads as a transposed operand instead of
  a copy), ``rhs_transposed`` (``rhs`` stored ``[batch, n, k]``), ``compute``
  (the type the operands are rounded to before they are multiplied:
  :data:`COMPUTE_TYPES`), ``alpha``, ``beta`` (floats), ``alpha_imag`` (a
  float, 0 but for complex GEMMs: alpha is ``alpha + alpha_imag * i``, XLA's
  ``alpha_real`` and ``alpha_imag``; :attr:`GemmCall.scale`), ``bias`` (bool),
  ``residual`` (bool), ``activation`` (:data:`ACTIVATIONS`: ``"relu"`` is
  ``max(x, 0)``, exactly XLA's ``maximum(x, 0)``; ``"gelu"`` is the tanh
  approximation ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``, cuBLASLt's
  GELU epilogue, which XLA fuses for a GELU written that way), ``aux``
  (bool, only with the GELU: the call also writes the activation's argument,
  ``alpha * sum + beta * c + bias`` rounded to the output type, to ``aux``:
  cuBLASLt's ``GELU_AUX`` / ``GELU_AUX_BIAS`` epilogues, which XLA's GEMM
  rewriter uses when that pre-activation is also read elsewhere, as a
  training step's backward pass reads it).

fp8 GEMMs (``f8e4m3fn`` x ``f8e4m3fn``, and either operand ``f8e5m2``: not
both, which cuBLASLt does not take) are XLA's ``__cublas$lt$matmul$f8``:
``out = round(d_scale * alpha * a_scale * b_scale * sum_k lhs * rhs)``, the
fp8 products summed in f32, ``a_scale``, ``b_scale`` (``scales``) and
``d_scale`` (``d_scale``) device f32 scalars, the result rounded to
``out_type`` (f32, bf16, f16, or an fp8 type: saturated to its largest
finite value first, as XLA's clamp before the convert says). No bias,
residual or activation (not yet). ``compute`` is ``""``.

- ``scales``: which operands have a device scale, ``""``, ``"a"``, ``"b"`` or
  ``"ab"`` (``true`` and ``false``, an older artefact's, are ``"ab"`` and
  ``""``): the arguments ``a_scale`` and/or ``b_scale`` (one f32 each) follow
  ``rhs``; a missing one is 1 (an fp8 dot as jax writes it unscaled, or only
  one operand dequantized with a scale: XLA passes a constant 1 there,
  cuBLASLt's unset scale pointer is 1). ``d_scale`` (bool, only with an fp8
  output): then ``d_scale`` (one f32), before ``out``: the factor the result
  is multiplied by before it is saturated and rounded (XLA passes ``1 / s``
  for a program's ``dot / s``, ``s`` for ``dot * s``).
- ``fast_accum`` (bool, fp8 only): the library may accumulate with fewer bits
  than f32 (cuBLASLt's ``FAST_ACCUM``), which XLA asks for an fp8 dot at
  DEFAULT precision (or the algorithm ``dot_any_f8_any_f8_f32_fast_accum``);
  the result is the contract's within :func:`agreement_tolerance`, wider for it.

- ``tuning`` (optional): the algorithm an autotuning pass on a device chose for
  this call (``heron compile --autotune``: ``heron.runtime.cuda.autotune``),
  as a list of ``[name, value]`` pairs (:class:`GemmTuning`): ``library``
  (``cublasLt``), ``device`` (the GPU's name), ``compute_capability``
  (``"9.0"``), ``version`` (the library's, ``cublasLtGetVersion``),
  ``algorithm`` (the library's algorithm descriptor, ``cublasLtMatmulAlgo_t``,
  as hex), ``seconds`` (its median time there) and ``candidates`` (how many
  algorithms were timed). As XLA keys its autotuning results by device and
  library version, a library uses it only on that device with that version
  and only where it still accepts the algorithm for the call; elsewhere it
  takes its heuristic's choice and the load-time report says why. The result
  is the contract's either way: the tuning changes the speed only.

An artefact written before an attribute existed leaves it out: a missing
attribute with a default (everything but the sizes) takes it.

:meth:`GemmCall.reference` computes the contract with numpy (the interpreter
device's "library", and what the GPU tests compare a library's result with).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import ml_dtypes
import numpy as np

from heron.hlo.dot_precision import rounding_unit
from heron.hlo.element_types import ElementType
from heron.runtime.core.library_contract import LibraryContract, contract_from_attributes
from heron.runtime.core.thunks import ThunkError

__all__ = [
    "ACCUMULATION",
    "FP8_TYPES",
    "ACTIVATIONS",
    "COMPUTE_TYPES",
    "FAST_ACCUM_UNIT",
    "FEATURES",
    "GEMM",
    "LIBRARY_FEATURES",
    "GemmCall",
    "GemmTuning",
    "agreement_tolerance",
    "call_features",
    "gelu_tanh",
    "library_computes",
    "rounded_to_compute",
]

#: The operation name of a GEMM library call.
GEMM = "gemm"
#: Epilogue activations the contract has (cuBLASLt's RELU and GELU; the module docstring).
ACTIVATIONS = ("none", "relu", "gelu")
#: ``compute`` -> the operand types it applies to: the operands are rounded to it first.
#: ``""`` is the operands' own type (no rounding); ``"tf32"`` keeps 10 of f32's 23
#: fraction bits (NVIDIA's TensorFloat-32), ``"bf16"`` 7 (XLA's ``dot_bf16_bf16_f32``).
COMPUTE_TYPES = {"": None, "tf32": ("f32",), "bf16": ("f32", "bf16")}
#: Fraction bits each narrowed compute type keeps.
_KEPT_FRACTION_BITS = {"tf32": 10, "bf16": 7}
#: (lhs type, rhs type) -> the type XLA accumulates a dot of them in.
ACCUMULATION = {
    ("f32", "f32"): "f32",
    ("f16", "f16"): "f32",
    ("bf16", "bf16"): "f32",
    ("f64", "f64"): "f64",
    ("c64", "c64"): "c64",
    ("c128", "c128"): "c128",
    ("s8", "s8"): "s32",
    ("f8e4m3fn", "f8e4m3fn"): "f32",
    ("f8e4m3fn", "f8e5m2"): "f32",
    ("f8e5m2", "f8e4m3fn"): "f32",
}
#: The fp8 element types a GEMM takes (cuBLASLt's ``CUDA_R_8F_E4M3``, ``_E5M2``).
FP8_TYPES = ("f8e4m3fn", "f8e5m2")
#: The relative rounding an fp8 call's fast accumulation may add (cuBLASLt's ``FAST_ACCUM``
#: sums in the fp8 tensor cores' accumulator without promoting it to f32 now and then,
#: which keeps fewer bits than f32; taken as 13 fraction bits, so that a correct library
#: is not refused on a wide sum).
FAST_ACCUM_UNIT = 2.0**-13
#: What an fp8 GEMM's f32 sum may be rounded to (an fp8 output only with fp8 inputs).
_FP8_OUTPUTS = ("f32", "f16", "bf16", *FP8_TYPES)
#: accumulation type -> the output types a call may round to.
_OUTPUTS = {
    "f32": ("f32", "f16", "bf16"),
    "f64": ("f64",),
    "c64": ("c64",),
    "c128": ("c128",),
    "s32": ("s32",),
}
#: What a call may ask besides the plain GEMM (:func:`call_features` names them).
FEATURES = ("transpose", "alpha", "residual", "bias", "relu", "gelu", "aux", "fp8")
#: GEMM library (its ``Library.name``, and ``Target.gemm_library``) -> the features it
#: computes: the one statement of what each library computes. The compiler matches no
#: fusion asking more of the Target's library (``heron.compiler.library_gemm``); a
#: device's binding offers no call asking more (:func:`library_computes`). cuBLASLt
#: takes everything; hipBLAS's GEMM has no epilogue (so no GELU and no auxiliary
#: output: ROCm keeps a GELU whose argument is read elsewhere in a kernel of its own),
#: and heron passes it no transposed operand.
LIBRARY_FEATURES = {
    "cublasLt": frozenset(FEATURES),
    "hipblas": frozenset({"alpha"}),
}
#: Accumulation types whose calls have no bias or activation epilogue (cuBLASLt's are for
#: real floating types): complex GEMMs take alpha and a C matrix with beta, as BLAS's
#: ``cgemm``/``zgemm`` do, and s32 ones (cuBLAS's rounding of integer scales is its own)
#: alpha alone.
_NO_EPILOGUE = ("s32", "c64", "c128")
_NO_RESIDUAL = ("s32",)
#: Accumulation types whose alpha may be complex.
COMPLEX_ACCUMULATIONS = ("c64", "c128")


def _positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ThunkError(f"gemm: {attribute.name} must be an integer >= 1, got {value!r}")


def _text(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ThunkError(f"gemm: tuning {attribute.name} must be a non-empty string, got {value!r}")


def _hex(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    _text(instance, attribute, value)
    try:
        bytes.fromhex(value)
    except ValueError:
        raise ThunkError(f"gemm: tuning algorithm must be hex digits, got {value!r:.80}") from None


def _count(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ThunkError(f"gemm: tuning {attribute.name} must be an integer >= 0, got {value!r}")


def _duration(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e9:
        raise ThunkError(f"gemm: tuning seconds must be a time >= 0, got {value!r}")


@attrs.frozen
class GemmTuning:
    """The algorithm an autotuning pass chose for one call on one device (the ``tuning``
    attribute of the module docstring).

    Kept with the call in the artefact, so that loading the artefact on the device it
    was tuned on runs the fastest algorithm measured there without measuring again;
    the device and library version are part of it because an algorithm descriptor
    means nothing to another GPU or another release of the library.
    """

    library: str = attrs.field(validator=_text)
    device: str = attrs.field(validator=_text)
    compute_capability: str = attrs.field(validator=_text)
    version: int = attrs.field(validator=_count)
    algorithm: str = attrs.field(validator=_hex)
    seconds: float = attrs.field(default=0.0, validator=_duration)
    candidates: int = attrs.field(default=0, validator=_count)

    @property
    def algorithm_bytes(self) -> bytes:
        return bytes.fromhex(self.algorithm)

    def to_attribute(self) -> list[list[Any]]:
        """The ``[name, value]`` pairs the thunk's attribute holds (JSON has no tuples)."""
        return [[f.name, getattr(self, f.name)] for f in attrs.fields(GemmTuning)]

    @classmethod
    def from_attribute(cls, value: Any) -> GemmTuning:
        """The tuning a thunk's ``tuning`` attribute holds; ThunkError saying what is wrong."""
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)
            for pair in value
        ):
            raise ThunkError(
                f"gemm: tuning must be a list of [name, value] pairs, got {value!r:.80}"
            )
        fields = dict(value)
        if len(fields) != len(value):
            raise ThunkError("gemm: tuning names a field twice")
        return contract_from_attributes(cls, fields, "gemm tuning")


#: ``scales`` values: which fp8 operands have a device scale (the module docstring).
_SCALES = ("", "a", "b", "ab")


def _to_scales(value: Any) -> Any:
    """``scales`` as one of :data:`_SCALES` (an older artefact's booleans: both or none);
    anything else is left for the call's check to name."""
    if value is True:
        return "ab"
    if value is False:
        return ""
    return value


def _to_tuning(value: Any) -> GemmTuning | None:
    if value is None or isinstance(value, GemmTuning):
        return value
    return GemmTuning.from_attribute(value)


@attrs.frozen
class GemmCall(LibraryContract):
    """One GEMM library call (see the module docstring for the contract)."""

    operation: ClassVar[str] = GEMM
    may_be_the_output: ClassVar[tuple[str, ...]] = ("c",)  # C = D, as BLAS does

    batch: int = attrs.field(validator=_positive)
    m: int = attrs.field(validator=_positive)
    n: int = attrs.field(validator=_positive)
    k: int = attrs.field(validator=_positive)
    lhs_type: str = "f32"
    rhs_type: str = "f32"
    out_type: str = "f32"
    lhs_transposed: bool = False
    rhs_transposed: bool = False
    compute: str = ""
    alpha: float = 1.0
    beta: float = 0.0
    bias: bool = False
    residual: bool = False
    activation: str = "none"
    aux: bool = False
    scales: str = attrs.field(default="", converter=_to_scales)
    d_scale: bool = False
    fast_accum: bool = False
    #: The imaginary part of a complex GEMM's alpha (XLA's ``alpha_imag``; 0 otherwise).
    alpha_imag: float = 0.0
    #: The algorithm an autotuning pass chose (None: the library's heuristic decides).
    tuning: GemmTuning | None = attrs.field(default=None, converter=_to_tuning)

    def __attrs_post_init__(self) -> None:
        accumulation = ACCUMULATION.get((self.lhs_type, self.rhs_type))
        if accumulation is None:
            raise ThunkError(
                f"gemm: no library GEMM of {self.lhs_type} x {self.rhs_type} (takes"
                f" {', '.join(' x '.join(pair) for pair in ACCUMULATION)})"
            )
        fp8 = self.lhs_type in FP8_TYPES
        outputs = _FP8_OUTPUTS if fp8 else _OUTPUTS[accumulation]
        if self.out_type not in outputs:
            raise ThunkError(
                f"gemm: {self.lhs_type} x {self.rhs_type} accumulates in {accumulation}, which"
                f" rounds to {', '.join(outputs)}, not {self.out_type}"
            )
        if fp8 and (self.bias or self.residual or self.activation != "none" or self.compute):
            raise ThunkError(
                f"gemm: an fp8 GEMM ({self.lhs_type} x {self.rhs_type}) has no bias, residual,"
                " activation or compute rounding"
            )
        if self.scales not in _SCALES:
            raise ThunkError(f"gemm: scales {self.scales!r} (takes {_SCALES})")
        if self.scales and not fp8:
            raise ThunkError(f"gemm: scales are for fp8 operands, not {self.lhs_type}")
        if self.fast_accum is True and not fp8:
            raise ThunkError(f"gemm: fast_accum is for fp8 operands, not {self.lhs_type}")
        if self.d_scale is True and self.out_type not in FP8_TYPES:
            raise ThunkError(f"gemm: d_scale is for an fp8 output, not {self.out_type}")
        if self.activation not in ACTIVATIONS:
            raise ThunkError(f"gemm: activation {self.activation!r} (takes {ACTIVATIONS})")
        if accumulation in _NO_EPILOGUE and (self.bias or self.activation != "none"):
            raise ThunkError(f"gemm: a {self.lhs_type} GEMM has no bias or activation epilogue")
        if accumulation in _NO_RESIDUAL and self.residual:
            raise ThunkError(f"gemm: a {self.lhs_type} GEMM has no residual (C matrix)")
        if self.compute not in COMPUTE_TYPES:
            raise ThunkError(f"gemm: compute {self.compute!r} (takes {tuple(COMPUTE_TYPES)})")
        takes = COMPUTE_TYPES[self.compute]
        if takes is not None and not {self.lhs_type, self.rhs_type} <= set(takes):
            raise ThunkError(
                f"gemm: compute {self.compute} rounds {', '.join(takes)} operands, not"
                f" {self.lhs_type} x {self.rhs_type}"
            )
        if self.aux is True and self.activation != "gelu":
            raise ThunkError(
                f"gemm: an auxiliary output is the GELU's argument; activation is {self.activation}"
            )
        for name in (
            "lhs_transposed",
            "rhs_transposed",
            "bias",
            "residual",
            "aux",
            "d_scale",
            "fast_accum",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ThunkError(f"gemm: {name} must be true or false")
        for name in ("alpha", "beta", "alpha_imag"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ThunkError(f"gemm: {name} must be a number, got {value!r}")
        if self.alpha_imag != 0 and accumulation not in COMPLEX_ACCUMULATIONS:
            raise ThunkError(
                f"gemm: a complex alpha ({complex(self.alpha, self.alpha_imag):g}) for a"
                f" {self.lhs_type} GEMM, which"
                f" accumulates in {accumulation}"
            )

    def attributes(self) -> dict[str, Any]:
        """The thunk's attributes; ``tuning`` as its pairs, and only where there is one (an
        untuned call's attributes are those of a heron without autotuning), and
        ``alpha_imag`` only where it is not 0 (a real GEMM's attributes are those of a
        heron before complex alphas)."""
        out = super().attributes()
        del out["tuning"]
        if self.alpha_imag == 0:
            del out["alpha_imag"]
        if self.tuning is not None:
            out["tuning"] = self.tuning.to_attribute()
        return out

    # -- derived ---------------------------------------------------------------------------
    @property
    def untuned(self) -> GemmCall:
        """The call without its tuning: what the library's descriptors depend on."""
        return self if self.tuning is None else attrs.evolve(self, tuning=None)

    @property
    def scale(self) -> float | complex:
        """alpha: ``alpha + alpha_imag * i`` for a complex GEMM, else the real ``alpha``."""
        if self.accumulation in COMPLEX_ACCUMULATIONS:
            return complex(self.alpha, self.alpha_imag)
        return self.alpha

    @property
    def accumulation(self) -> str:
        """The type the products are summed in (XLA's for the input types)."""
        return ACCUMULATION[(self.lhs_type, self.rhs_type)]

    @property
    def outputs(self) -> int:  # type: ignore[override]
        """The arguments the call computes (the last ones): ``out``, and ``aux`` with it."""
        return 2 if self.aux else 1

    @property
    def operand_names(self) -> tuple[str, ...]:
        """The arguments, in order: ``lhs``, ``rhs``, [``a_scale``], [``b_scale``],
        [``d_scale``], [``bias``], [``c``], ``out``, [``aux``]."""
        return (
            "lhs",
            "rhs",
            *("a_scale",) * ("a" in self.scales),
            *("b_scale",) * ("b" in self.scales),
            *("d_scale",) * self.d_scale,
            *("bias",) * self.bias,
            *("c",) * self.residual,
            "out",
            *("aux",) * self.aux,
        )

    def argument(self, name: str) -> int | None:
        """The position of argument ``name`` (None where the call has none)."""
        names = self.operand_names
        return names.index(name) if name in names else None

    def element_counts(self) -> tuple[int, ...]:
        """Elements of each argument, in :attr:`operand_names` order."""
        out = self.batch * self.m * self.n
        sizes = {"lhs": self.batch * self.m * self.k, "rhs": self.batch * self.k * self.n}
        sizes |= {"bias": self.n, "c": out, "out": out, "aux": out}
        sizes |= {"a_scale": 1, "b_scale": 1, "d_scale": 1}
        return tuple(sizes[name] for name in self.operand_names)

    def element_types(self) -> tuple[str, ...]:
        types = {"lhs": self.lhs_type, "rhs": self.rhs_type}
        types |= {"a_scale": "f32", "b_scale": "f32", "d_scale": "f32"}
        return tuple(types.get(name, self.out_type) for name in self.operand_names)

    def byte_sizes(self) -> tuple[int, ...]:
        """Bytes of each argument, in :attr:`operand_names` order."""
        return tuple(
            count * ElementType(kind).byte_width
            for count, kind in zip(self.element_counts(), self.element_types(), strict=True)
        )

    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    def describe(self) -> str:
        """``gemm f16[8x64x32] x f16[8x32x128]^T -> f32, tf32, bias, relu`` for reports
        (``^T``: the operand is read transposed)."""
        batch = f"{self.batch}x" if self.batch > 1 else ""
        extras = [
            self.compute,
            f"alpha {_number(self.scale)}" if self.scale != 1 else "",
            f"beta {self.beta:g}" if self.beta != 0 else "",
            "bias" if self.bias else "",
            "residual" if self.residual else "",
            "" if self.activation == "none" else self.activation,
            "aux" if self.aux else "",
            {"": "", "a": "a_scale", "b": "b_scale", "ab": "scales"}.get(self.scales, ""),
            "d_scale" if self.d_scale else "",
            "fast_accum" if self.fast_accum else "",
        ]
        return (
            f"gemm {self.lhs_type}[{batch}{self.m}x{self.k}]{'^T' * self.lhs_transposed} x"
            f" {self.rhs_type}[{batch}{self.k}x{self.n}]{'^T' * self.rhs_transposed} ->"
            f" {self.out_type}" + "".join(f", {e}" for e in extras if e)
        )

    # -- numpy -------------------------------------------------------------------------------
    def reference(self, arguments: Sequence[np.ndarray]) -> Any:
        """The contract computed with numpy from the arguments' raw bytes (uint8 arrays,
        in :attr:`operand_names` order, the outputs last: what they held before).

        Returns the output's bytes, or with ``aux`` the pair (output's, aux's).
        Products are summed in the accumulation type (numpy's order, not a GPU
        library's: floats agree within the accumulation's rounding, integers
        exactly), the operands first rounded to ``compute`` (to nearest, ties
        to even), as the library's tensor cores take them.
        """
        if len(arguments) != len(self.operand_names):
            raise ThunkError(
                f"{self.describe()}: takes {len(self.operand_names)} arguments, given"
                f" {len(arguments)}"
            )
        raw = dict(zip(self.operand_names, arguments, strict=True))

        def typed(name: str, kind: str, shape: tuple[int, ...]) -> np.ndarray:
            dtype = ElementType(kind).numpy_dtype
            return np.ascontiguousarray(raw[name]).view(dtype).reshape(shape)

        accumulate = ElementType(self.accumulation).numpy_dtype
        b, m, n, k = self.batch, self.m, self.n, self.k
        a = typed("lhs", self.lhs_type, (b, k, m) if self.lhs_transposed else (b, m, k))
        w = typed("rhs", self.rhs_type, (b, n, k) if self.rhs_transposed else (b, k, n))
        if self.lhs_transposed:
            a = a.transpose(0, 2, 1)
        if self.rhs_transposed:
            w = w.transpose(0, 2, 1)
        a, w = (rounded_to_compute(x, self.compute).astype(accumulate) for x in (a, w))
        with np.errstate(over="ignore", invalid="ignore"):
            result = np.matmul(a, w)  # int32 wraps, as XLA's s32 accumulation
            if self.scales:  # a missing scale is 1
                scale = np.float32(1)
                for name in ("a_scale", "b_scale"):
                    if name in raw:
                        scale = scale * typed(name, "f32", ())
                result = (result * scale).astype(accumulate)
            if self.scale != 1:
                result = (result * np.asarray(self.scale, accumulate)).astype(accumulate)
            if self.beta != 0:
                before = typed("c" if self.residual else "out", self.out_type, (b, m, n))
                result = result + np.asarray(self.beta, accumulate) * before.astype(accumulate)
            if self.bias:
                result = result + typed("bias", self.out_type, (n,)).astype(accumulate)
            before_activation = result
            if self.activation == "relu":
                result = np.maximum(result, np.zeros((), accumulate))
            elif self.activation == "gelu":
                result = gelu_tanh(result)
        out_dtype = ElementType(self.out_type).numpy_dtype
        if self.d_scale:
            result = (result * typed("d_scale", "f32", ())).astype(accumulate)
        if self.out_type in FP8_TYPES:  # saturated, as XLA's clamp before the convert
            largest = float(ml_dtypes.finfo(out_dtype).max)
            result = np.where(np.isnan(result), result, np.clip(result, -largest, largest))

        def raw_bytes(values: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(values.astype(out_dtype)).reshape(-1).view(np.uint8)

        if self.aux:
            return raw_bytes(result), raw_bytes(before_activation)
        return raw_bytes(result)


def _number(value: float | complex) -> str:
    """``2``, ``0.5``, or a complex value's ``(2+1j)`` where its imaginary part is not 0."""
    if isinstance(value, complex) and value.imag == 0:
        value = value.real
    return f"{value:g}" if isinstance(value, float) else f"({value:g})"


def agreement_tolerance(call: GemmCall) -> float:
    """How far two correct computations of ``call`` may be apart, relative to
    ``1 + |value|`` per element: 0 for integers (exact); for floats twice what each may
    be from the exact result, 4 units of the output type (or of the narrowed
    ``compute``'s rounding, which tensor cores may do otherwise) times ``sqrt(k)``:
    summing ``k`` products in another order (another algorithm, split-K) moves the
    result by about that. The autotuning pass drops a candidate algorithm whose result
    is further than this from the heuristic's (as XLA's autotuner checks each one).
    An fp8 call with ``fast_accum`` may keep fewer bits while it sums: its unit is at
    least :data:`FAST_ACCUM_UNIT`.
    """
    if call.accumulation == "s32":
        return 0.0
    unit = float(ml_dtypes.finfo(ElementType(call.out_type).numpy_dtype).eps)
    if call.compute:
        unit = max(unit, 2 * rounding_unit(call.compute))
    if call.fast_accum:
        unit = max(unit, FAST_ACCUM_UNIT)
    return 2 * (4 * unit * math.sqrt(call.k) + 1e-6)


def call_features(call: GemmCall) -> frozenset[str]:
    """The :data:`FEATURES` ``call`` asks for: a transposed operand, an alpha other than
    1, a bias, a residual, an activation, an auxiliary output, fp8 operands."""
    used = set()
    if call.lhs_transposed or call.rhs_transposed:
        used.add("transpose")
    if call.scale != 1:
        used.add("alpha")
    used |= {name for name in ("bias", "residual", "aux") if getattr(call, name)}
    if call.activation != "none":
        used.add(call.activation)
    if call.lhs_type in FP8_TYPES:
        used.add("fp8")
    return frozenset(used)


def library_computes(library: str, call: GemmCall) -> bool:
    """Whether ``library`` (a :data:`LIBRARY_FEATURES` key) computes ``call`` whole."""
    return call.operation == GEMM and call_features(call) <= LIBRARY_FEATURES[library]


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation in ``x``'s type: cuBLASLt's GELU epilogue, and jax's
    ``gelu(approximate=True)``."""
    dtype = x.dtype
    half, one = np.asarray(0.5, dtype), np.asarray(1, dtype)
    scale, cubic = np.asarray(np.sqrt(2 / np.pi), dtype), np.asarray(0.044715, dtype)
    return (half * x * (one + np.tanh(scale * (x + cubic * x * x * x)))).astype(dtype)


def rounded_to_compute(values: np.ndarray, compute: str) -> np.ndarray:
    """``values`` rounded to nearest (ties to even) to ``compute``'s fraction bits."""
    kept = _KEPT_FRACTION_BITS.get(compute)
    if kept is None or values.dtype != np.float32:
        return values
    dropped = 23 - kept
    bits = np.ascontiguousarray(values).view(np.uint32).astype(np.uint64)
    odd = (bits >> dropped) & 1
    rounded = (bits + (1 << (dropped - 1)) - 1 + odd) >> dropped << dropped
    finite = np.isfinite(values)  # inf and NaN keep their bits
    out = np.where(finite, rounded, bits).astype(np.uint32).view(np.float32)
    return out.reshape(values.shape)
