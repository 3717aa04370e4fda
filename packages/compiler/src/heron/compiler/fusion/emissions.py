"""How many times a fused computation's kernel evaluates each of its instructions.

XLA's "IR size" of a fusion (``GpuHloCostAnalysis``: the times each fused
instruction is emitted). An emitter computes a fusion's values by indexing from
its roots: an elementwise op reads its operands at its own index, so a value
read along elementwise paths only is computed once per element of the root
those paths start from, however many ops read it; any other op (a slice, a
broadcast, a pad, a reduce) reads its operand at indices of its own, so the
operand is computed again for each evaluation of that op. A value two slices of
one array read (``x[0::2]`` and ``x[1::2]``, jax's ``associative_scan``) is
computed twice per element, and a tree of such levels doubles it at each level.

Priority fusion refuses a fusion whose count goes over :data:`MAX_EMISSIONS`,
as XLA's ``ProducerConsumerMergedTooLarge`` does ("the fusion would result in an
overly large code duplication"). heron's partitioner emits each such value as a
function, so the code does not grow, but its evaluations do: jaxns's evidence
sampler fused the up- and down-sweep of a 1,300-element ``associative_scan``
into one kernel counting 115 million, which ran for hours on the interpreter
where XLA's eight kernels take milliseconds.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import attrs

from heron.hlo.ir import Computation, Instruction
from heron.hlo.opcodes import is_elementwise

__all__ = ["MAX_EMISSIONS", "Emissions", "count_emissions", "fused_emissions"]

#: The most evaluations a fused computation may count: XLA's ``kMaxIRSize``.
MAX_EMISSIONS = 10_000

#: Ops that read their operands at their own index besides the elementwise ones
#: (XLA's ``IsElementwise`` holds for a copy; a tuple and its elements pass through).
_READ_IN_PLACE = frozenset({"copy", "tuple", "get-tuple-element"})


@functools.cache
def _reads_in_place(opcode: str) -> bool:
    return is_elementwise(opcode) or opcode in _READ_IN_PLACE


@attrs.frozen
class Emissions:
    """A fused computation's evaluation count: ``total`` over its instructions, and
    how many times each parameter is read (by parameter number: what a producer
    fused in through that parameter is multiplied by)."""

    total: int
    by_parameter: tuple[int, ...]


def count_emissions(body: Computation) -> Emissions:
    """``body``'s :class:`Emissions`: each instruction counts the sum of the counts of
    the *roots* it is read from along elementwise paths, where the fusion's root
    counts one and an operand of any other op is a root of its own, counting what
    that op counts (XLA's ``FusionCalculateUtilizations``).

    Asked for every candidate the fusion passes check: an instruction read by one
    elementwise op shares that op's set of roots (one object, its sum made once),
    which most are, so a chain costs a dict lookup per op."""
    root = body.root_instruction
    # the sets of roots reaching each instruction through its elementwise users, and
    # what its other users count (which makes it a root of its own)
    reached: dict[Instruction, list[frozenset[Instruction]]] = {root: [frozenset((root,))]}
    root_counts: dict[Instruction, int] = {root: 1}
    sums: dict[frozenset[Instruction], int] = {}
    total = 0
    by_parameter: dict[int, int] = {}
    for inst in reversed(body.post_order()):  # every user before what it reads
        sets = reached.get(inst)
        own = root_counts.get(inst)
        if sets is None and own is None:
            continue  # read by nothing the root needs
        if own is not None and inst is not root:
            sets = [*(sets or ()), frozenset((inst,))]
        assert sets is not None
        roots = sets[0] if len(sets) == 1 else frozenset().union(*sets)
        count = sums.get(roots)
        if count is None:
            count = sums[roots] = sum(root_counts[r] for r in roots)
        total += count
        if inst.parameter_number is not None:
            by_parameter[inst.parameter_number] = count
        if _reads_in_place(inst.opcode):
            for operand in inst.operands:
                reaching = reached.get(operand)
                if reaching is None:
                    reached[operand] = [roots]
                else:
                    reaching.append(roots)
        else:
            for operand in inst.operands:
                root_counts[operand] = root_counts.get(operand, 0) + count
    parameters = max(by_parameter, default=-1) + 1
    return Emissions(total, tuple(by_parameter.get(k, 0) for k in range(parameters)))


def fused_emissions(producer: Emissions, user: Emissions, parameters: Sequence[int]) -> int:
    """What the fusion of a producer into its user counts, the user reading the producer
    through ``parameters`` of its body: each of the producer's evaluations made once
    per evaluation of those parameters (the count adds along paths and multiplies
    along chains). Instructions the two bodies share after fusing (a constant both
    broadcast) count once where they meet, so the fusion built counts at most this."""
    reads = sum(user.by_parameter[k] for k in parameters)
    return user.total - reads + reads * producer.total
