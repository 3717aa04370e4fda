"""Which dot fusions a GEMM library call computes, and with which contract (issue 28).

XLA:GPU sends every dot it can to cuBLASLt, with what cuBLASLt fuses around
it (its GEMM rewriter): operands read transposed instead of copied, a scale
(alpha), a matrix added (C, beta), a bias vector, a RELU or the tanh GELU.
heron does the same in two places, both deciding through :func:`match_gemm`:

- the fusion passes (:class:`heron.compiler.fusion.fusible.FusionChecker`)
  make no fusion around a library-typed dot that the Target's library cannot
  compute whole (:func:`splits_at_library`): what the library does not fuse
  (a SiLU, a select, a producer computing an operand) goes into a fusion of its
  own, the split XLA makes at the library boundary;
- thunk emission gives a fusion that matches a
  :class:`~heron.runtime.core.thunks.LibraryCallThunk` of the GEMM contract
  (:mod:`heron.runtime.core.gemm`) with heron's own kernel as its fallback
  for the backends whose device may lack the library or refuse the call
  (``BackendSpec.library_always_runs``); the runtime picks one when it loads
  the executable.

A fusion matches when its computation is exactly, and nothing more than::

    activation(alpha * dot(A, B) + C + broadcast(bias))

- ``dot`` canonical (``heron.hlo.passes.dot_decomposer``: batch, m, k x batch,
  k, n), its element types ones the contract takes, every shape row-major;
- ``A`` and ``B`` parameters of the fusion, each perhaps through bitcasts and
  one transpose of its last two dimensions (read transposed by the library;
  fp8 and s8: the rhs only, cuBLASLt's "TN"), or, on a Target with fp8 GEMMs,
  both fp8 parameters read through their dequantization (``convert``, perhaps
  times a broadcast f32 scalar: the call's scales, one or both;
  :mod:`.library_gemm_fp8`);
- ``alpha``: a multiply by (or divide by) a scalar constant, on the dot itself;
- ``C``: a parameter of the output's shape and type (``beta`` 1), ``bias`` a
  parameter ``[n]`` of the output type broadcast along the last dimension;
  added in any order;
- ``activation``: ``maximum(x, 0)`` (RELU) or any arrangement of multiplies,
  adds and one tanh of ``x`` and constants that computes GELU's tanh
  approximation (checked numerically, so that jax's, flax's and hand-written
  spellings all match);
- an fp8 dot's result may be saturated and rounded to fp8 after its alpha,
  ``convert(clamp(-max, x * s, max))`` (:func:`.library_gemm_fp8.fp8_output`;
  ``s`` a parameter, the call's ``d_scale``, or absent): the call's output is
  then fp8;
- a GELU's argument ``x`` may be read elsewhere too (a training step's
  backward pass): the fusion then has two outputs, ``(GELU, x)`` in either
  order, and the call an auxiliary output (the contract's ``aux``, cuBLASLt's
  ``GELU_AUX``), as XLA's rewriter makes it when nothing else of the GELU's
  spelling is shared.

Each library takes part of that, as the GEMM contract's
:data:`heron.runtime.core.gemm.LIBRARY_FEATURES` says (re-exported here):
cuBLASLt all of it, hipBLAS (no epilogue) the dot and alpha only. When a fusion does not
match, :func:`match_gemm` says why, and heron's reports print it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs
import numpy as np

from heron.compiler.library_gemm_fp8 import (
    Fp8Operand,
    Fp8Output,
    fp8_gemms,
    fp8_operand,
    fp8_output,
)
from heron.compiler.library_gemm_layout import TN_TYPES, operand_reading
from heron.hlo.dot_precision import dot_compute, fp8_fast_accumulation
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.dot_decomposer import is_canonical_dot
from heron.hlo.shapes import ArrayShape
from heron.runtime.core.gemm import (
    ACCUMULATION,
    FP8_TYPES,
    GEMM,
    LIBRARY_FEATURES,
    GemmCall,
    call_features,
    gelu_tanh,
)
from heron.runtime.core.thunks import BufferSlice, LibraryCallThunk, Thunk, ThunkError
from heron.target import Target

__all__ = [
    "LIBRARY_FEATURES",
    "GemmLibraryCall",
    "GemmMatch",
    "dot_fusion_verdicts",
    "dot_verdict",
    "epilogue_members",
    "gemm_fusion",
    "gemm_library_call",
    "library_verdict",
    "match_gemm",
    "splits_at_library",
    "target_features",
]

#: Ops a GELU's spelling may use besides constants and its argument.
_GELU_OPCODES = frozenset({"multiply", "add", "subtract", "divide", "negate", "tanh", "convert"})
#: Each instruction's users in one computation.
Users = Mapping[Instruction, list[Instruction]]
#: Whether an instruction is a value the fusion reads (see :func:`_chain`).
Input = Callable[[Instruction], bool]
#: Where the numeric GELU check samples its argument.
_GELU_SAMPLES = np.linspace(-6.0, 6.0, 97)


@attrs.frozen
class GemmMatch:
    """A fusion computation a GEMM library call computes: the call, which fusion
    parameters feed its arguments (the call's order, the outputs left out) and which
    fusion outputs its computed arguments are (``out``, then ``aux`` where it has one)."""

    call: GemmCall
    parameters: tuple[int, ...]
    outputs: tuple[int, ...] = (0,)


def target_features(target: Target) -> frozenset[str]:
    """What ``target``'s GEMM library computes there: :data:`LIBRARY_FEATURES`, without
    fp8 on a device without fp8 tensor cores (before sm_89)."""
    features = LIBRARY_FEATURES[target.gemm_library]
    return features if fp8_gemms(target) else features - {"fp8"}


def _tn(dot: Instruction) -> bool:
    """Whether cuBLASLt reads ``dot``'s operands only as lhs [m, k], rhs [n, k] (fp8, s8)."""
    return any(o.array_shape.element_type.value in TN_TYPES for o in dot.operands)


def _fp8_sides(dot: Instruction, features: frozenset[str], is_input: Input) -> list[Fp8Operand]:
    """Both operands of ``dot`` as fp8 values (their dequantization read by the library;
    the lhs never read transposed), or [] where they are not both fp8 or the library
    takes none."""
    if "fp8" not in features:
        return []
    batch = len(dot.attributes.get("lhs_batch_dims", ()))
    sides = []
    for number, side in enumerate(dot.operands):
        found = fp8_operand(side, batch, number == 1 and "transpose" in features, _scalar_constant)
        if found is None or not is_input(found.source):
            return []
        sides.append(found)
    return sides


def _row_major(shape: object) -> bool:
    return isinstance(shape, ArrayShape) and shape.is_row_major


def _scalar_constant(inst: Instruction) -> float | None:
    """The value of a real scalar constant, or of a broadcast of one; else None (a complex
    constant is a complex GEMM's alpha only: :func:`_scale_constant`)."""
    if inst.opcode == "broadcast":
        inst = inst.operands[0]
    if inst.opcode != "constant":
        return None
    literal = inst.literal
    if not isinstance(literal, np.ndarray) or literal.size != 1 or literal.dtype.kind == "c":
        return None
    return float(literal.reshape(-1)[0])


def _scale_constant(inst: Instruction, complex_gemm: bool) -> float | complex | None:
    """The scalar constant (or broadcast of one) ``inst`` is, as a GEMM's alpha: real, or
    for a complex GEMM complex (XLA's ``alpha_real`` and ``alpha_imag``); else None."""
    if not complex_gemm:
        return _scalar_constant(inst)
    if inst.opcode == "broadcast":
        inst = inst.operands[0]
    if inst.opcode != "constant":
        return None
    literal = inst.literal
    if not isinstance(literal, np.ndarray) or literal.size != 1 or literal.dtype.kind != "c":
        return None
    return complex(literal.reshape(-1)[0])


def _positive_zero(inst: Instruction) -> bool:
    value = _scalar_constant(inst)
    return value is not None and value == 0 and not np.signbit(value)


def _through_bitcasts(inst: Instruction) -> Instruction:
    while inst.opcode == "bitcast" and _row_major(inst.operands[0].shape):
        inst = inst.operands[0]
    return inst


def _operand(inst: Instruction, batch: int, features: frozenset[str]) -> tuple[int, bool] | str:
    """(parameter number, read transposed) of a dot operand, or why the library cannot read it."""
    transposed = False
    rank = inst.array_shape.rank
    if inst.opcode == "transpose" and rank >= batch + 2:
        swap = (*range(batch), batch + 1, batch)
        if tuple(inst.attributes.get("dimensions", ())) == swap and _row_major(inst.shape):
            if "transpose" not in features:
                return "the library reads no transposed operand"
            transposed, inst = True, inst.operands[0]
    source = _through_bitcasts(inst)
    if source.opcode != "parameter":
        return f"its operand {inst.name} is computed in the fusion ({inst.opcode})"
    reading = operand_reading(source.array_shape, batch) if source is inst else ""
    if reading == "transposed" and "transpose" in features:
        # stored with its last two dimensions swapped: the library reads it transposed
        return int(source.parameter_number), not transposed
    if not _row_major(source.shape):
        return f"its operand {source.name} is not row-major ({source.shape})"
    return int(source.parameter_number), transposed


@attrs.define
class _Epilogue:
    """What :func:`_chain` found above the dot: the ops cuBLASLt computes before its
    activation, and the instructions the bias vector and the residual matrix are."""

    top: Instruction
    members: list[Instruction]
    alpha: float | complex = 1.0
    bias: Instruction | None = None
    residual: Instruction | None = None


def _single_user(inst: Instruction, users: Users) -> Instruction | None:
    found = users.get(inst, [])
    return found[0] if len(found) == 1 else None


def _constant_members(inst: Instruction) -> list[Instruction]:
    """A scalar constant, or a broadcast and the scalar constant it broadcasts."""
    return [inst, *inst.operands] if inst.opcode == "broadcast" else [inst]


def _chain(dot: Instruction, users: Users, features: frozenset[str], is_input: Input) -> _Epilogue:
    """Climb from ``dot`` through the ops cuBLASLt computes before its activation.

    ``is_input(inst)``: whether ``inst`` is a value the fusion reads (a parameter of a
    fused computation; anything outside the fusion being planned).
    """
    found = _Epilogue(dot, [dot])
    out_type = dot.array_shape.element_type
    while (user := _single_user(found.top, users)) is not None:
        other = [o for o in user.operands if o is not found.top]
        if len(other) != 1 or len(user.operands) != 2:
            break
        (operand,) = other
        if user.opcode in ("multiply", "divide") and found.top is dot and "alpha" in features:
            value = _scale_constant(operand, out_type.is_complex)
            if value is None or (user.opcode == "divide" and user.operands[0] is not dot):
                break
            if value == 0 or not np.isfinite(value):
                break
            found.alpha = value if user.opcode == "multiply" else 1.0 / value
            found.members += [user, *_constant_members(operand)]
        elif user.opcode == "add" and operand.opcode == "broadcast" and found.bias is None:
            vector = operand.operands[0]
            rank = dot.array_shape.rank
            if (
                "bias" not in features
                or tuple(operand.attributes.get("dimensions", ())) != (rank - 1,)
                or not is_input(vector)
                or vector.array_shape.element_type != out_type
            ):
                break
            found.bias = vector
            found.members += [user, operand]
        elif user.opcode == "add" and found.residual is None:
            matrix = _through_bitcasts(operand)
            if (
                "residual" not in features
                or not is_input(matrix)
                or not _row_major(matrix.shape)
                or matrix.array_shape.element_type != out_type
                or matrix.array_shape.num_elements != dot.array_shape.num_elements
            ):
                break
            found.residual = matrix
            found.members += [user]
            if matrix is not operand:
                found.members += _bitcasts_between(operand, matrix)
        else:
            break
        found.top = user
    return found


def _bitcasts_between(top: Instruction, bottom: Instruction) -> list[Instruction]:
    chain = []
    while top is not bottom:
        chain.append(top)
        top = top.operands[0]
    return chain


def _activation(
    top: Instruction,
    users: Users,
    features: frozenset[str],
    root: Instruction | None,
    aux: bool = False,
) -> tuple[str, Instruction, list[Instruction]] | None:
    """The activation computed from ``top``: its name, the instruction computing it and
    the members from ``top`` (excluded) up to it; None when there is none.

    ``root``: the fused computation's root (matching a fusion); None when planning
    one, where the largest GELU whose every intermediate value stays inside is found.
    ``aux``: ``top`` itself (the GELU's argument) may be read elsewhere too, and becomes
    the call's auxiliary output (XLA's rewriter asks the same: every value of the GELU's
    spelling but its argument read by the GELU alone).
    """
    relu = _single_user(top, users)
    if (
        relu is not None
        and relu.opcode == "maximum"
        and "relu" in features
        and (root is None or relu is root)
    ):
        other = next((o for o in relu.operands if o is not top), None)
        if other is not None and _positive_zero(other):
            return "relu", relu, [relu, *_constant_members(other)]
    if "gelu" not in features:
        return None
    for end in [root] if root is not None else _reachable_gelu_ops(top, users):
        members = _members_between(end, top)
        inside = {m for m in members}
        # every value but the end stays inside: nothing else reads the GELU's parts
        if any(
            user not in inside
            for inst in (*((top,) * (not aux)), *members)
            if inst is not end
            for user in users.get(inst, [])
        ):
            continue
        if _is_gelu(end, top):
            return "gelu", end, members
    return None


def _reachable_gelu_ops(top: Instruction, users: Users) -> list[Instruction]:
    """The ops a GELU's spelling may use, reachable from ``top`` through such ops, the
    latest first (the largest candidate GELU first)."""
    found: list[Instruction] = []
    seen: set[Instruction] = set()
    stack = [top]
    while stack:
        inst = stack.pop()
        for user in users.get(inst, []):
            if user in seen or user.opcode not in _GELU_OPCODES:
                continue
            seen.add(user)
            found.append(user)
            stack.append(user)
    depth: dict[Instruction, int] = {}

    def level(inst: Instruction) -> int:
        if inst is top or inst not in seen:
            return 0
        if inst not in depth:
            depth[inst] = 1 + max(level(o) for o in inst.operands)
        return depth[inst]

    return sorted(found, key=level, reverse=True)


def _moves_no_byte(inst: Instruction) -> bool:
    """A transpose or bitcast whose result has its operand's bytes (only the logical
    shape changes: a ``{0,1}`` transpose of a ``{1,0}`` matrix)."""
    if inst.opcode == "bitcast":
        return True
    if inst.opcode != "transpose":
        return False
    permutation = inst.attributes.get("dimensions", ())
    mine, theirs = inst.array_shape.minor_to_major, inst.operands[0].array_shape.minor_to_major
    return tuple(permutation[d] for d in mine) == tuple(theirs)


def _result_transpose(inst: Instruction, dot: Instruction, features: frozenset[str]) -> bool:
    """Whether ``inst`` transposes the last two dimensions of a value of the dot's shape
    into a row-major result (the library then computes the transposed product)."""
    batch = len(dot.attributes.get("lhs_batch_dims", ()))
    rank = dot.array_shape.rank
    return (
        "transpose" in features
        and inst.opcode == "transpose"
        and rank == batch + 2
        and tuple(inst.attributes.get("dimensions", ())) == (*range(batch), batch + 1, batch)
        and _row_major(inst.shape)
        and len(dot.operands[0].array_shape.dims) == batch + 2
        and len(dot.operands[1].array_shape.dims) == batch + 2
    )


def _operand_members(dot: Instruction, features: frozenset[str]) -> list[Instruction]:
    """The transposes (of the last two dimensions) the library reads instead of copying,
    and an fp8 operand's dequantization (fp8 and s8: the rhs only, "TN")."""
    fp8 = _fp8_sides(dot, features, lambda inst: True)
    if fp8:
        return [m for side in fp8 for m in side.members]
    batch = len(dot.attributes.get("lhs_batch_dims", ()))
    members = []
    for number, side in enumerate(dot.operands):
        if number == 0 and _tn(dot):
            continue
        swap = (*range(batch), batch + 1, batch)
        if (
            "transpose" in features
            and side.opcode == "transpose"
            and side.array_shape.rank == batch + 2
            and tuple(side.attributes.get("dimensions", ())) == swap
            and _row_major(side.shape)
        ):
            members.append(side)
    return members


def epilogue_members(
    dot: Instruction, users: Users, features: frozenset[str]
) -> list[tuple[list[Instruction], list[Instruction]]]:
    """The fusions a library computes around ``dot`` of an unfused computation, largest
    first: (members, the members computing the fusion's outputs). The last is the dot
    and its transposed operands alone. A GELU whose argument is read elsewhere too
    computes two outputs, the GELU and its argument (the call's auxiliary output),
    where the library has one."""
    operands = _operand_members(dot, features)
    epilogue = _chain(dot, users, features, lambda inst: True)
    plans: list[tuple[list[Instruction], list[Instruction]]] = []
    if _fp8_sides(dot, features, lambda inst: True):
        output = fp8_output(epilogue.top, lambda inst: users.get(inst, []))
        if output is not None and not output.divides:
            # the f32 sum saturated and rounded to fp8 by the call (its d_scale: ``s``)
            plans.append(([*operands, *epilogue.members, *output.members], [output.convert]))
    activation = _activation(epilogue.top, users, features, None)
    aux = False
    if activation is None and "aux" in features:
        activation = _activation(epilogue.top, users, features, None, aux=True)
        aux = activation is not None
    end, members = epilogue.top, list(epilogue.members)
    if activation is not None:
        end, members = activation[1], [*members, *activation[2]]
    transpose = _single_user(end, users)
    if (
        not aux
        and transpose is not None
        and (
            _moves_no_byte(transpose)
            or (
                _result_transpose(transpose, dot, features)
                and epilogue.bias is None
                and epilogue.residual is None
            )
        )
    ):
        plans.append(([*operands, *members, transpose], [transpose]))
    if activation is not None:
        plans.append(([*operands, *members], [end, epilogue.top] if aux else [end]))
    plans.append(([*operands, *epilogue.members], [epilogue.top]))
    if epilogue.top is not dot:
        plans.append(([*operands, dot], [dot]))
    unique = []
    for members, outputs in plans:
        unique.append((list(dict.fromkeys(members)), outputs))
    return unique


def _evaluate_univariate(
    root: Instruction, x: Instruction, values: np.ndarray
) -> np.ndarray | None:
    """``root`` as a function of ``x`` alone, evaluated in float64 at ``values``; None when
    it uses anything but :data:`_GELU_OPCODES`, scalar constants and ``x``."""
    memo: dict[Instruction, np.ndarray] = {}

    def value(inst: Instruction) -> np.ndarray | None:
        if inst is x:
            return values
        if inst in memo:
            return memo[inst]
        constant = _scalar_constant(inst)
        if constant is not None:
            result = np.full_like(values, constant)
        elif inst.opcode in _GELU_OPCODES:
            args = [value(o) for o in inst.operands]
            if any(a is None for a in args):
                return None
            result = {
                "multiply": lambda: args[0] * args[1],
                "add": lambda: args[0] + args[1],
                "subtract": lambda: args[0] - args[1],
                "divide": lambda: args[0] / args[1],
                "negate": lambda: -args[0],
                "tanh": lambda: np.tanh(args[0]),
                "convert": lambda: args[0],
            }[inst.opcode]()
        else:
            return None
        memo[inst] = result
        return result

    with np.errstate(all="ignore"):
        return value(root)


def _is_gelu(root: Instruction, x: Instruction) -> bool:
    """Whether ``root`` computes GELU's tanh approximation of ``x`` (to the precision of
    its type: a bf16 spelling rounds its constants)."""
    got = _evaluate_univariate(root, x, _GELU_SAMPLES)
    if got is None or not any(i.opcode == "tanh" for i in _members_between(root, x)):
        return False
    element = root.array_shape.element_type
    tolerance = 1e-5 if element.bit_width >= 32 else 2.0**-6
    expected = gelu_tanh(_GELU_SAMPLES)
    return bool(np.all(np.abs(got - expected) <= tolerance * (1 + np.abs(expected))))


def _members_between(root: Instruction, x: Instruction) -> list[Instruction]:
    """The instructions computing ``root`` from ``x`` (``x`` excluded)."""
    seen: dict[Instruction, Instruction] = {}
    stack = [root]
    while stack:
        inst = stack.pop()
        if inst is x or inst in seen:
            continue
        seen[inst] = inst
        stack.extend(inst.operands)
    return list(seen.values())


def match_gemm(computation: Computation, target: Target) -> GemmMatch | str:
    """The library GEMM ``computation`` (a fusion's) is, or why it is none (a sentence
    fragment: "the fusion also computes exponential.3")."""
    library = target.gemm_library
    if not library:
        return f"no GEMM library on {target.backend}"
    features = target_features(target)
    dots = [i for i in computation.instructions if i.opcode == "dot"]
    if len(dots) != 1:
        return f"the fusion holds {len(dots)} dots"
    (dot,) = dots
    verdict = dot_verdict(dot, target)
    if verdict:
        return verdict
    users = computation.users()
    root = computation.root
    epilogue = _chain(dot, users, features, lambda inst: inst.opcode == "parameter")
    members = {i for i in epilogue.members}
    outputs: tuple[int, ...] = (0,)
    fp8_out = _fp8_result(root, epilogue.top, users, features)
    if fp8_out is not None:
        members |= set(fp8_out.members)
        root = epilogue.top
    aux = root.opcode == "tuple"
    if aux:
        # two outputs: a GELU and its argument, the call's auxiliary output
        found_aux = _aux_outputs(root, epilogue.top, library, features)
        if isinstance(found_aux, str):
            return found_aux
        outputs = found_aux
        members.add(root)
        root = root.operands[outputs[0]]
    # out^T = (A B)^T = B^T A^T: a transposed result is the GEMM of the swapped operands
    transposed_out = (
        not aux
        and root is not epilogue.top
        and _result_transpose(root, dot, features)
        and epilogue.bias is None
        and epilogue.residual is None
    )
    if transposed_out or (not aux and root is not epilogue.top and _moves_no_byte(root)):
        members.add(root)
        root = root.operands[0]
    activation = "none"
    if root is not epilogue.top:
        found = _activation(epilogue.top, users, features, root, aux=aux)
        if found is None:
            return f"the fusion also computes {root.opcode} {root.name} after the dot"
        activation = found[0]
        members |= {i for i in found[2]}
    if aux and activation != "gelu":
        return f"the fusion's second output {root.name} is no GELU of the first"
    lhs, rhs = dot.operands
    batch = len(dot.attributes.get("lhs_batch_dims", ()))
    sides = []
    fp8 = _fp8_sides(dot, features, lambda inst: inst.opcode == "parameter")
    scale_numbers: tuple[int, ...] = ()
    for number, side in enumerate((lhs, rhs)):
        if fp8:
            found = fp8[number]
            if not _row_major(found.source.shape):
                return f"dot {dot.name}: its operand {found.source.name} is not row-major"
            sides.append((int(found.source.parameter_number), found.transposed))
            members |= set(found.members)
            continue
        # fp8 and s8: cuBLASLt reads the lhs [m, k] only ("TN"): a transpose is a kernel
        reads = features - {"transpose"} if number == 0 and _tn(dot) else features
        read = _operand(side, batch, reads)
        if isinstance(read, str):
            return f"dot {dot.name}: {read}"
        sides.append(read)
        chain = side
        while chain.opcode in ("transpose", "bitcast"):
            members.add(chain)
            chain = chain.operands[0]
    scaled = ""
    if fp8:  # each operand's device scale, where it has one (the other's is 1)
        for letter, side in zip("ab", fp8, strict=True):
            if side.scale is None:
                continue
            if side.scale.opcode != "parameter":
                return f"dot {dot.name}: an fp8 scale is computed in the fusion"
            scaled += letter
            scale_numbers += (int(side.scale.parameter_number),)
    elif fp8_out is not None:
        return f"dot {dot.name}: an fp8 output of operands that are not fp8"
    for inst in computation.instructions:
        if inst in members or inst.opcode in ("parameter", "constant"):
            continue
        if inst.opcode == "broadcast" and _scalar_constant(inst) is not None:
            continue
        return f"the fusion also computes {inst.opcode} {inst.name}"
    (lhs_number, lhs_transposed), (rhs_number, rhs_transposed) = sides
    has_k = bool(dot.attributes.get("lhs_contracting_dims", ()))
    lhs_dims = list(lhs.array_shape.dims)
    rhs_dims = list(rhs.array_shape.dims)
    has_m = len(lhs_dims) - batch - has_k == 1
    has_n = len(rhs_dims) - batch - has_k == 1
    if (lhs_transposed and not (has_m and has_k)) or (rhs_transposed and not (has_n and has_k)):
        return f"dot {dot.name}: a transposed operand without two matrix dimensions"
    types = (lhs.array_shape.element_type.value, rhs.array_shape.element_type.value)
    compute = dot_compute(dot, tf32=target.tf32)
    alpha = epilogue.alpha
    out_type = dot.array_shape.element_type.value
    if fp8:  # the products of fp8 values, exact in f32: no operand rounding
        types = tuple(side.source.array_shape.element_type.value for side in fp8)
        compute = ""
        alpha *= fp8[0].constant_scale * fp8[1].constant_scale
    d_scale_number: tuple[int, ...] = ()
    if fp8_out is not None:
        out_type = fp8_out.convert.array_shape.element_type.value
        if fp8_out.scale is not None:
            d_scale_number = (int(fp8_out.scale.parameter_number),)
    try:
        call = GemmCall(
            batch=int(np.prod(lhs_dims[:batch], dtype=np.int64)) if batch else 1,
            m=lhs_dims[batch] if has_m else 1,
            n=rhs_dims[-1] if has_n else 1,
            k=lhs_dims[-1] if has_k else 1,
            lhs_type=types[0],
            rhs_type=types[1],
            out_type=out_type,
            lhs_transposed=lhs_transposed,
            rhs_transposed=rhs_transposed,
            compute=compute,
            alpha=float(np.real(alpha)),
            alpha_imag=float(np.imag(alpha)),
            beta=1.0 if epilogue.residual is not None else 0.0,
            bias=epilogue.bias is not None,
            residual=epilogue.residual is not None,
            activation=activation,
            aux=aux,
            scales=scaled,
            d_scale=bool(d_scale_number),
            fast_accum=bool(fp8) and fp8_fast_accumulation(dot),
        )
    except ThunkError as error:
        return str(error)
    if transposed_out:
        call = attrs.evolve(
            call,
            m=call.n,
            n=call.m,
            lhs_type=call.rhs_type,
            rhs_type=call.lhs_type,
            lhs_transposed=not call.rhs_transposed,
            rhs_transposed=not call.lhs_transposed,
        )
        lhs_number, rhs_number = rhs_number, lhs_number
        scale_numbers = scale_numbers[::-1]
        call = attrs.evolve(call, scales={"a": "b", "b": "a"}.get(call.scales, call.scales))
    missing = call_features(call) - features
    if missing:
        return f"{library} does not compute {', '.join(sorted(missing))}"
    parameters = (
        lhs_number,
        rhs_number,
        *scale_numbers,
        *d_scale_number,
        *(() if epilogue.bias is None else (epilogue.bias.parameter_number,)),
        *(() if epilogue.residual is None else (epilogue.residual.parameter_number,)),
    )
    return GemmMatch(call, tuple(parameters), outputs)


def _fp8_result(
    root: Instruction, top: Instruction, users: Users, features: frozenset[str]
) -> Fp8Output | None:
    """The fp8 output (:func:`.library_gemm_fp8.fp8_output`) a fused computation's
    ``root`` is, computed from ``top`` with a multiply by a parameter (the call's
    ``d_scale``) or none; None where it is not one (a divide: the compiler makes it a
    multiply by the reciprocal before fusing)."""
    if "fp8" not in features or root.opcode != "convert":
        return None
    found = fp8_output(top, lambda inst: users.get(inst, []))
    if found is None or found.convert is not root or found.divides:
        return None
    if found.scale is not None and found.scale.opcode != "parameter":
        return None
    return found


def _aux_outputs(
    root: Instruction, top: Instruction, library: str, features: frozenset[str]
) -> tuple[int, int] | str:
    """(out, aux): which of a two-output fusion's outputs are the activation and its
    argument ``top`` (the call's auxiliary output), or why the fusion is no such call."""
    if len(root.operands) != 2:
        return f"the fusion computes {len(root.operands)} outputs"
    if "aux" not in features:
        return f"{library} does not compute aux (a second output)"
    if top not in root.operands or root.operands[0] is root.operands[1]:
        return "the fusion's second output is not the dot's epilogue before its activation"
    aux = root.operands.index(top)
    return 1 - aux, aux


def dot_verdict(dot: Instruction, target: Target) -> str:
    """Why no library takes ``dot`` whatever its fusion on ``target`` ("" when one may)."""
    if not isinstance(dot.shape, ArrayShape) or not is_canonical_dot(dot):
        return f"dot {dot.name} is not canonical"
    types = tuple(o.array_shape.element_type.value for o in dot.operands)
    if types not in ACCUMULATION:
        return f"dot {dot.name}: no library GEMM of {' x '.join(types)}"
    if types[0] in FP8_TYPES and not fp8_gemms(target):
        return (
            f"dot {dot.name}: no library GEMM of {' x '.join(types)} on {target.name}"
            f" (cuBLASLt's fp8 GEMMs need sm_89; {_capability(target)})"
        )
    if not _row_major(dot.shape):
        return f"dot {dot.name}: its result is not row-major ({dot.shape})"
    if any(size == 0 for o in dot.operands for size in o.array_shape.dims):
        return f"dot {dot.name}: an empty operand"
    return ""


def _capability(target: Target) -> str:
    capability = target.compute_capability
    return f"sm_{capability[0]}{capability[1]}" if capability else target.backend


def splits_at_library(computation: Computation, target: Target) -> str:
    """Why a candidate fusion must not be made ("" when it may): it holds a dot a
    library takes on ``target`` and something the library does not compute with it
    (see the module docstring). A dot alone is never refused: it is a library call,
    or heron's kernel where the library cannot read its operands."""
    if not target.gemm_library:
        return ""
    dots = [i for i in computation.instructions if i.opcode == "dot"]
    if not dots:
        return ""
    computing = [
        i
        for i in computation.instructions
        if i.opcode not in ("parameter", "constant") and _scalar_constant(i) is None
    ]
    if len(computing) == 1:
        return ""
    if all(dot_verdict(dot, target) for dot in dots):
        return ""  # heron's kernel computes these dots anyway: fuse as it likes
    found = match_gemm(computation, target)
    return found if isinstance(found, str) else ""


def gemm_fusion(fusion: Instruction, target: Target) -> GemmMatch | None:
    """The library GEMM ``fusion`` is on ``target`` (see the module docstring), or None."""
    if fusion.opcode != "fusion":
        return None
    found = match_gemm(fusion.called("calls"), target)
    return found if isinstance(found, GemmMatch) else None


def library_verdict(fusion: Instruction, target: Target) -> str:
    """For reports: ``cublasLt: gemm ...`` or why the fusion's dot runs heron's kernel."""
    found = match_gemm(fusion.called("calls"), target)
    if isinstance(found, GemmMatch):
        return f"{target.gemm_library}: {found.call.describe()}"
    return f"heron's GEMM kernel: {found}"


def dot_fusion_verdicts(module: Module, target: Target) -> list[tuple[str, str]]:
    """(fusion name, :func:`library_verdict`) for every fusion of a compiled ``module``
    that holds a dot, in its computations' order."""
    return [
        (inst.name, library_verdict(inst, target))
        for inst in module.instructions()
        if inst.opcode == "fusion"
        and any(i.opcode == "dot" for i in inst.called("calls").instructions)
    ]


@attrs.frozen
class GemmLibraryCall:
    """A GEMM fusion the library computes, before any kernel is compiled for it: the
    contract's call and its arguments (the fusion's slices in the contract's order)."""

    call: GemmCall
    arguments: tuple[BufferSlice, ...]

    def thunk(self, fallback: Sequence[Thunk] = (), emitter: str = "") -> LibraryCallThunk:
        """The library call, with heron's ``fallback`` thunks (by ``emitter``) beside it."""
        return LibraryCallThunk(
            library="blas",
            operation=GEMM,
            arguments=self.arguments,
            attributes=self.call.attributes(),
            fallback=tuple(fallback),
            fallback_emitter=emitter if fallback else "",
        )


def gemm_library_call(
    fusion: Instruction,
    inputs: Sequence[BufferSlice],
    outputs: Sequence[BufferSlice],
    target: Target,
) -> GemmLibraryCall | None:
    """The GEMM library call computing ``fusion`` from its slices, or None when the fusion
    is no library GEMM or its slices do not fit the contract (an output over an operand:
    the library writes out of place)."""
    found = gemm_fusion(fusion, target)
    if found is None or len(outputs) != len(found.outputs) or len(inputs) != len(fusion.operands):
        return None
    arguments = (*(inputs[p] for p in found.parameters), *(outputs[o] for o in found.outputs))
    try:
        found.call.check_slices(arguments)
    except ThunkError:
        return None
    return GemmLibraryCall(found.call, arguments)
