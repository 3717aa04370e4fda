"""Give every computation run in sequence (a while's condition and body, a conditional's
branch, a call's computation) one caller: a computation reached from a second call site
is cloned for it.

Buffer assignment gives each such computation's values one set of buffers
(:func:`heron.hlo.buffers.dataflow.sequential_computations` refuses a second caller),
and the loop and conditional passes rewrite a body in place for the loop they look at
(``while-loop-simplifier`` drops a carried value from *its* loop's body). A module as
JAX prints it has one caller per region, but ``call-inliner`` makes shared ones: a
jitted helper holding a loop (jax's threefry ``_random_bits``, which both
``jax.random.categorical`` and ``jax.random.gumbel`` call) is one computation called
twice, and inlining both calls leaves two ``while`` instructions naming the same
condition and body. This is XLA's ``FlattenCallGraph``, which XLA runs for the same
reason; computations applied elementwise (a reduce's ``to_apply``, a sort's comparator,
a fusion's body) keep sharing, since they own no buffers.

The clones get module-unique names derived from the originals and keep their source
locations; what a clone itself runs in sequence is cloned in turn when it was already
reached, so one run leaves a tree.
"""

from __future__ import annotations

from heron.hlo.attributes import ComputationRef, InstructionRefs
from heron.hlo.builder import NameUniquer
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import module_names

__all__ = ["SEQUENTIAL_ATTRIBUTES", "flatten_call_graph"]

#: Per opcode, the attributes naming computations that opcode runs in sequence (each
#: gets buffers of its own); a conditional names its branches in one of two spellings.
SEQUENTIAL_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "while": ("condition", "body"),
    "conditional": ("branch_computations", "true_computation", "false_computation"),
    "call": ("to_apply",),
}


@hlo_pass(
    "flatten-call-graph",
    "clone a while body, condition, branch or called computation reached from a second"
    " call site, so each has one caller",
)
def flatten_call_graph(module: Module) -> bool:
    """Clone every sequentially run computation for each caller after its first; True
    when one was cloned."""
    names: NameUniquer | None = None
    reached: set[int] = {id(module.entry)}
    changed = False
    stack = [module.entry]
    while stack:
        computation = stack.pop()
        for inst in computation.instructions:
            for attribute in SEQUENTIAL_ATTRIBUTES.get(inst.opcode, ()):
                value = inst.attributes.get(attribute)
                if value is None:
                    continue
                refs = value if isinstance(value, tuple) else (value,)
                replaced: list[ComputationRef] = []
                for ref in refs:
                    callee = ref.computation if isinstance(ref, ComputationRef) else None
                    if callee is None:
                        replaced.append(ref)
                        continue
                    if id(callee) in reached:
                        names = names or module_names(module)
                        callee = _clone(module, callee, computation, names)
                        changed = True
                    reached.add(id(callee))
                    stack.append(callee)
                    replaced.append(ComputationRef(callee.name, callee))
                inst.attributes[attribute] = (
                    tuple(replaced) if isinstance(value, tuple) else (replaced[0])
                )
    return changed


def _clone(
    module: Module, original: Computation, caller: Computation, names: NameUniquer
) -> Computation:
    """A copy of ``original`` under a fresh name, its instructions renamed, inserted in the
    module before ``caller`` (a computation is printed before those that call it)."""
    clone = Computation(
        names.unique(original.name),
        location=original.location,
        trailing_attributes=original.trailing_attributes,
    )
    mapped: dict[int, Instruction] = {}
    renamed: dict[str, str] = {}
    for inst in original.post_order():  # every instruction, operands first
        copy = inst.clone([mapped[id(op)] for op in inst.operands], names.unique(inst.name))
        renamed[inst.name] = copy.name
        mapped[id(inst)] = copy
    clone.instructions = [mapped[id(inst)] for inst in original.instructions]  # text order
    for inst in clone.instructions:
        inst.parent = clone
    for inst in clone.instructions:
        predecessors = inst.attributes.get("control-predecessors")
        if isinstance(predecessors, InstructionRefs):
            inst.attributes["control-predecessors"] = InstructionRefs(
                tuple(renamed.get(name, name) for name in predecessors.names)
            )
    clone.root = mapped[id(original.root_instruction)]
    module.computations.insert(module.computations.index(caller), clone)
    return clone
