"""jax's general (non-Hermitian) eigendecomposition lowered for a GPU, on the host.

``jnp.linalg.eig``, ``eigvals`` and ``jax.lax.linalg.eig`` lowered for CUDA or
ROCm are, in jax 0.10 (``_eig_gpu_lowering`` in ``jax/_src/lax/linalg.py``):

- ``?hybrid_eig_real(a) -> (wr, wi, vl, vr, info)`` for f32/f64 and
  ``?hybrid_eig_comp(a) -> (w, vl, vr, info)`` for c64/c128 (prefixes ``cu``,
  ``hip``): jaxlib's "hybrid" kernel, which copies the matrix to the host and
  runs LAPACK's ``?geev`` there (or MAGMA's, ``magma = "on"``: the same
  contract), so running it on the host is what XLA:GPU does too.
  ``backend_config`` holds ``left``, ``right`` (which eigenvectors) and
  ``magma`` (``"on"``, ``"off"`` or ``"auto"``; ignored here: LAPACK always).
  Eigenvalues are ``wr + i wi`` (real operand) or ``w``; the eigenvectors are
  complex columns whatever the operand (the real routine's packed conjugate
  pairs ``(re, im)`` are unpacked to ``re + i im`` and ``re - i im``), each of
  unit 2-norm with its largest component real (LAPACK's normalisation); ``vl``
  holds left eigenvectors ``u^H A = w u^H``; ``info`` is ``?geev``'s (``> 0``:
  the QR iteration failed; jax then makes that matrix's results NaN). An
  eigenvector result not asked for is zeros (jax drops it).
- ``cusolver_geev_ffi(a) -> (a', w, vl, vr, info)`` (CUDA only, where jax finds
  cuSOLVER 11.7.1 or newer and no left eigenvectors are asked for, or
  ``implementation=CUSOLVER``): ``w`` complex, ``vl`` and ``vr`` of the
  operand's type, a real operand's vectors *packed* as LAPACK's (jax unpacks
  them itself); ``a'`` is the operand's buffer (cuSOLVER's workspace; jax
  ignores it: the operand is returned).

Each matrix is LAPACK's ``?geev`` in the operand's type through scipy
(:mod:`heron.jax.scipy_lapack`: the library jax's own kernels call), so the
results equal jax's on the CPU exactly.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec
from heron.jax.ffi_attributes import boolean, check_magma
from heron.jax.scipy_lapack import check_dtype, check_matrices, routine, workspace

__all__ = ["eig_batch", "eig_specs", "geev", "hybrid_eig", "unpack_pairs"]


def unpack_pairs(wi: np.ndarray, packed: np.ndarray) -> np.ndarray:
    """A real ``?geev``'s eigenvectors as complex columns: where ``wi[j] > 0`` columns
    ``j`` and ``j + 1`` hold ``(re, im)`` of the pair ``re + i im``, ``re - i im``."""
    vectors = packed.astype(np.result_type(packed.dtype, np.complex64))
    j = 0
    while j < len(wi):
        if wi[j] != 0 and j + 1 < len(wi):
            pair = packed[:, j] + 1j * packed[:, j + 1]
            vectors[:, j], vectors[:, j + 1] = pair, pair.conj()
            j += 2
        else:
            j += 1
    return vectors


def _geev(matrix: np.ndarray, left: bool, right: bool):
    """One matrix's ``?geev``: ``(wr, wi)`` or ``(w,)``, packed ``vl``, ``vr``, ``info``."""
    n = matrix.shape[0]
    lwork = workspace(routine("geev_lwork", matrix.dtype)(n, compute_vl=left, compute_vr=right))
    *w, vl, vr, info = routine("geev", matrix.dtype)(
        matrix, compute_vl=left, compute_vr=right, lwork=lwork
    )
    return w, vl, vr, int(info)


def _operand(call: CustomCall, a: np.ndarray, *, real: bool | None) -> None:
    check_dtype(call, a, "square matrices")
    check_matrices(call, a, a.dtype, square=True)
    if real is not None and (a.dtype.kind == "c") == real:
        kind = "real" if real else "complex"
        raise call.error(f"takes {kind} matrices, not {a.dtype}")


def hybrid_eig(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``?hybrid_eig_real`` and ``?hybrid_eig_comp`` (the module docstring)."""
    (a,) = operands
    real = call.target.endswith("_real")
    _operand(call, a, real=real)
    check_magma(call)
    return eig_batch(a, real=real, left=boolean(call, "left"), right=boolean(call, "right"))


def eig_batch(a: np.ndarray, *, real: bool, left: bool, right: bool) -> list[np.ndarray]:
    """``?geev`` of every matrix of a batch: ``[wr, wi]`` or ``[w]``, then complex ``vl``,
    ``vr`` (zeros where not asked for) and ``info``; also jax's CPU ``lapack_?geev_ffi``."""
    batch, n = a.shape[:-2], a.shape[-1]
    complex_type = np.result_type(a.dtype, np.complex64)
    values = [np.zeros((*batch, n), a.dtype) for _ in range(2 if real else 1)]
    vl = np.zeros((*batch, n, n), complex_type)
    vr = np.zeros((*batch, n, n), complex_type)
    infos = np.zeros(batch, np.int32)
    for index in np.ndindex(*batch):
        w, left_vectors, right_vectors, infos[index] = _geev(a[index], left, right)
        for k, part in enumerate(w):
            values[k][index] = part
        wi = w[1] if real else np.zeros(n)
        if left:
            vl[index] = unpack_pairs(wi, left_vectors) if real else left_vectors
        if right:
            vr[index] = unpack_pairs(wi, right_vectors) if real else right_vectors
    return [*values, vl, vr, infos]


def geev(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``cusolver_geev_ffi`` (the module docstring): vectors left packed for jax to unpack."""
    (a,) = operands
    _operand(call, a, real=None)
    left, right = boolean(call, "left"), boolean(call, "right")
    batch, n = a.shape[:-2], a.shape[-1]
    w = np.zeros((*batch, n), np.result_type(a.dtype, np.complex64))
    vl, vr = np.zeros_like(a), np.zeros_like(a)
    infos = np.zeros(batch, np.int32)
    for index in np.ndindex(*batch):
        values, left_vectors, right_vectors, infos[index] = _geev(a[index], left, right)
        w[index] = values[0] + 1j * values[1] if len(values) == 2 else values[0]
        if left:
            vl[index] = left_vectors
        if right:
            vr[index] = right_vectors
    return [a.copy(), w, vl, vr, infos]


def eig_specs(prefixes: tuple[str, ...]) -> list[CustomCallSpec]:
    """The eigendecomposition targets, for jax's prefixes (``cu``, ``hip``)."""
    library = {"cu": "CUDA", "hip": "ROCm"}
    specs = [
        CustomCallSpec(
            target=f"{prefix}hybrid_eig_{kind}",
            host=hybrid_eig,
            description=f"jax's {library[prefix]} hybrid (host LAPACK) eig of {kind} matrices"
            " (jnp.linalg.eig, eigvals)",
        )
        for prefix in prefixes
        for kind in ("real", "comp")
    ]
    specs.append(
        CustomCallSpec(
            target="cusolver_geev_ffi",
            host=geev,
            description="jax's cuSOLVER eig (jax.lax.linalg.eig, implementation CUSOLVER),"
            " on the host",
        )
    )
    return specs
