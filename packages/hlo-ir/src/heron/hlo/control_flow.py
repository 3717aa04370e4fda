"""What a conditional's operands mean: its branches, and which one a selector picks.

One definition for everything that runs or rewrites a ``conditional`` (the
reference evaluator, the conditional simplifier, the runtime's conditional
thunk): a ``pred`` selector picks ``true_computation`` (branch 0) or
``false_computation`` (branch 1); an integer selector picks that branch, and an
index out of range picks the last one, as XLA does.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.attributes import ComputationRef
from heron.hlo.errors import HloVerifyError
from heron.hlo.ir import Computation, Instruction

__all__ = ["branch_index", "conditional_branches"]


def conditional_branches(inst: Instruction) -> list[Computation]:
    """The branches of conditional ``inst`` in selector order (``true`` first for a pred)."""
    refs = inst.attributes.get("branch_computations")
    if refs is None:
        return [inst.called("true_computation"), inst.called("false_computation")]
    refs = refs if isinstance(refs, tuple) else (refs,)
    branches = [r.computation for r in refs if isinstance(r, ComputationRef)]
    if not branches or len(branches) != len(refs) or any(b is None for b in branches):
        raise HloVerifyError(
            f"'{inst.name}' (conditional): branch_computations are not resolved computations",
            inst.location,
        )
    return branches  # type: ignore[return-value]


def branch_index(selector: object, branch_count: int) -> int:
    """The branch a selector value picks: pred true 0 / false 1; out of range the last."""
    value = np.asarray(selector)
    if value.dtype == np.bool_:
        return 0 if bool(value) else 1
    index = int(value.astype(np.int64))
    return index if 0 <= index < branch_count else branch_count - 1
