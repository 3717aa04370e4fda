"""Running expand-math's approximations on the host and measuring them in ulps.

The accuracy tests of expand-math (``test_math_accuracy``, ``test_pass_expand_math``,
``test_math_fmod``) all apply one op elementwise through the host JIT after
the pass, check that the pass left only natively lowered math behind, and
compare against a high-precision reference. Those steps live here.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
from mlir import ir

from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import expand_math
from heron.hlo.element_types import ElementType
from heron_test_support.host_jit import run_elementwise


def expand_checked(module: ir.Module, gone: Collection[str] = ()) -> None:
    """Expand ``module``'s math and check that only native math ops, and none of ``gone``, remain.

    Used as ``run_elementwise``'s ``pre_lowering``.
    """
    expand_math.expand_module(module)
    names = {op.name for op in walk_ops(module.operation)}
    left = {name for name in names if name.startswith("math.")}
    assert left <= expand_math.NATIVE_MATH, left
    assert not names & set(gone), names & set(gone)


def run_op(op_class, element: ElementType, *inputs: np.ndarray) -> np.ndarray:
    """``op_class`` (an MLIR op builder) applied elementwise to ``inputs`` after expand-math."""
    (out,) = run_elementwise(
        lambda args: [op_class(*args).result],
        [element] * len(inputs),
        [element],
        [np.asarray(x, dtype=element.numpy_dtype) for x in inputs],
        pre_lowering=expand_checked,
    )
    return out


def ulp_error(out: np.ndarray, ref, dtype) -> np.ndarray:
    """|out - ref| in ulps of ref rounded to ``dtype``; inf where the special values differ."""
    ref_hi = np.asarray(ref, dtype=np.longdouble)
    rounded = ref_hi.astype(dtype)
    out_l = out.astype(np.longdouble)
    err = np.zeros(out.shape, dtype=np.float64)
    special = ~np.isfinite(rounded) | ~np.isfinite(out)
    same = (np.isnan(rounded) & np.isnan(out)) | (rounded == out)
    err[special & ~same] = np.inf
    regular = ~special
    spacing = np.spacing(np.abs(rounded[regular])).astype(np.longdouble)
    err[regular] = np.abs(out_l[regular] - ref_hi[regular]) / spacing
    return err
