"""Turn each computing instruction of an unfused entry computation into a fusion of its own.

JAX and XLA's ``--xla_disable_all_hlo_passes`` dumps give modules whose entry
computation holds plain ``add``, ``broadcast``, ``tanh``... instructions with
no fusion around them. heron's emitters compile fusions, so before a device
can run such a module every instruction that computes is *outlined*: a new
computation ``fused_<name>`` gets one parameter per distinct operand and a
clone of the instruction as its root, and the entry gets a ``fusion``
instruction (``kind=kLoop``, same name and shape) that calls it.

What the executor does on the host stays as it is: parameters, constants,
tuples, get-tuple-element, bitcasts, and fusions already made. Instructions no
heron emitter can run as a loop fusion (convolution, control flow, custom
calls, collectives, random numbers, fft, ...) are refused here, with an error
naming the instruction, its opcode and shape, rather than later with an
emitter's error about a fusion the user never wrote. A ``sort``, a ``dot`` or
a ``topk`` (one the top-k decomposer kept) becomes a fusion of its own, as
XLA gives it a kernel of its own (``HERO_OPCODES``): its hero emitter
(``heron.plugins.sort``, ``heron.plugins.gemm``, ``heron.plugins.topk``),
not the loop emitter, emits it.
"""

from __future__ import annotations

from collections.abc import Collection

from heron.hlo.attributes import ComputationRef
from heron.hlo.builder import ComputationBuilder, NameUniquer
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.verifier import verify_module

__all__ = [
    "HERO_OPCODES",
    "HOST_OPCODES",
    "REFUSED_OPCODES",
    "outline_module",
    "outlined_name",
    "refusal",
]

#: Instructions that compute nothing on the device (no kernel): thunk emission
#: resolves them into buffer slices.
HOST_OPCODES = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})

#: Instructions outlined alone into a fusion that a hero emitter, not the loop
#: emitter, emits (XLA gives them a kernel of their own).
HERO_OPCODES = frozenset({"sort", "dot", "topk"})

#: Opcodes no heron emitter runs as a loop fusion: library calls in XLA
#: (convolution, fft, custom-call), control flow and calls (their bodies would
#: need an executor of their own), collectives, and random number generators.
REFUSED_OPCODES = frozenset(
    {
        "convolution",
        "fft",
        "custom-call",
        "triangular-solve",
        "cholesky",
        "while",
        "conditional",
        "call",
        "async-start",
        "async-update",
        "async-done",
        "all-reduce",
        "all-reduce-start",
        "all-reduce-done",
        "all-gather",
        "all-gather-start",
        "all-gather-done",
        "all-to-all",
        "collective-permute",
        "collective-permute-start",
        "collective-permute-done",
        "reduce-scatter",
        "partition-id",
        "replica-id",
        "send",
        "send-done",
        "recv",
        "recv-done",
        "infeed",
        "outfeed",
        "after-all",
        "rng",
        "rng-bit-generator",
        "rng-get-and-update-state",
        "scatter",
        "select-and-scatter",
        "batch-norm-training",
        "batch-norm-inference",
        "batch-norm-grad",
        "domain",
        "add-dependency",
        "opt-barrier",
        "optimization-barrier",
        "copy-start",
        "copy-done",
    }
)


def outlined_name(instruction_name: str) -> str:
    """The name of the computation an instruction is outlined into (before uniquing)."""
    return f"fused_{instruction_name}"


def describe(inst: Instruction) -> str:
    """``'name' (opcode, shape)`` with the source position when known, for error messages."""
    where = f" at {inst.location}" if inst.location is not None else ""
    return f"'{inst.name}' ({inst.opcode}, {inst.shape}){where}"


def _refuse(inst: Instruction, why: str) -> UnsupportedError:
    return UnsupportedError(f"cannot run instruction {describe(inst)}: {why}", inst.location)


#: Why an opcode of REFUSED_OPCODES is refused, where there is more to say than "not yet".
REFUSAL_REASONS = {
    "convolution": "a convolution runs as the im2col and GEMM the convolution-to-dot pass"
    " lowers it to, and this one was not lowered (the pass did not run, or its"
    " dim_labels are not a convolution dimension spec)",
}


def refusal(inst: Instruction) -> UnsupportedError:
    """The error for an instruction of REFUSED_OPCODES: what it is, where, and why not."""
    return _refuse(
        inst, REFUSAL_REASONS.get(inst.opcode, f"no heron emitter handles {inst.opcode} yet")
    )


def _check_outlinable(inst: Instruction, computable: Collection[str] | None) -> None:
    if inst.opcode in REFUSED_OPCODES:
        raise refusal(inst)
    if computable is not None and inst.opcode not in computable and inst.opcode not in HERO_OPCODES:
        raise _refuse(inst, f"heron's loop emitter has no lowering for {inst.opcode}")


def _fused_computation(inst: Instruction, operands: list[Instruction], name: str) -> Computation:
    """A computation with a parameter per distinct operand and a clone of ``inst`` as root."""
    builder = ComputationBuilder(name, names=NameUniquer())
    parameters = {
        id(operand): builder.parameter(operand.shape, name=f"param_{k}")
        for k, operand in enumerate(operands)
    }
    builder.op(
        inst.opcode,
        [parameters[id(operand)] for operand in inst.operands],
        inst.attributes,
        inst.shape,
        name=inst.name,
        literal=inst.literal,
    )
    computation = builder.build()
    computation.location = inst.location
    return computation


def _distinct(operands: list[Instruction]) -> list[Instruction]:
    seen: dict[int, Instruction] = {}
    for operand in operands:
        seen.setdefault(id(operand), operand)
    return list(seen.values())


def outline_module(module: Module, computable: Collection[str] | None = None) -> Module:
    """A module whose entry computation computes only through fusions.

    ``computable`` is the set of opcodes the loop emitter can compute (the
    compiler hands down ``heron.emitters.elemental.core.supported_opcodes()``);
    an instruction outside it is refused here, naming it. ``None`` refuses
    only ``REFUSED_OPCODES``.

    The result shares the original's non-entry computations (fusion bodies,
    reducers) and instructions' attribute values; the original is not changed.
    A module that is already fused comes back with the same structure.
    """
    entry = module.entry
    taken = {computation.name for computation in module.computations}
    new_entry = Computation(
        entry.name,
        is_entry=True,
        location=entry.location,
        trailing_attributes=entry.trailing_attributes,
    )
    added: list[Computation] = []
    mapped: dict[int, Instruction] = {}
    for inst in _reachable(entry):
        operands = [mapped[id(operand)] for operand in inst.operands]
        if inst.opcode in HOST_OPCODES or inst.opcode == "fusion":
            new = inst.clone(operands)
        else:
            _check_outlinable(inst, computable)
            name = _unique(outlined_name(inst.name), taken)
            distinct = _distinct(operands)
            body = _fused_computation(inst.clone(operands), distinct, name)
            added.append(body)
            new = Instruction(
                name=inst.name,
                opcode="fusion",
                shape=inst.shape,
                operands=distinct,
                attributes={"kind": "kLoop", "calls": ComputationRef(name, body)},
                location=inst.location,
            )
        new_entry.add(new)
        mapped[id(inst)] = new
    new_entry.root = mapped[id(entry.root_instruction)]
    computations = [c for c in module.computations if c is not entry]
    result = Module(
        module.name,
        computations=[*computations, *added, new_entry],
        header=dict(module.header),
        fusion_under_test=module.fusion_under_test,
        source=module.source,
        layouts_assigned=module.layouts_assigned,
    )
    verify_module(result)
    return result


def _reachable(entry: Computation) -> list[Instruction]:
    """The entry's instructions the root depends on, operands first (dead code is not run)."""
    live: set[int] = set()
    stack = [entry.root_instruction]
    while stack:
        inst = stack.pop()
        if id(inst) not in live:
            live.add(id(inst))
            stack.extend(inst.operands)
    return [
        inst
        for inst in entry.post_order()
        if id(inst) in live or inst.opcode == "parameter"  # the signature stays the same
    ]


def _unique(base: str, taken: set[str]) -> str:
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}.{n}"
    taken.add(name)
    return name
