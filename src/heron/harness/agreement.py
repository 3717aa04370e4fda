"""Whether a program's outputs agree with the reference, output by output.

``heron run --check`` compares every output of a compiled program with the
reference evaluator's: :func:`output_tolerances` decides, once per output,
how it may differ (the fusion that computes it judged as ``heron check``
judges that fusion, widened by the kernels before it:
:func:`heron.harness.tolerance.output_tolerance`), and :func:`compare`
applies that tolerance and says in one line how the output compares. The CLI
only prints these lines.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

__all__ = [
    "Agreement",
    "WrittenSum",
    "bitwise_agreements",
    "compare",
    "output_tolerances",
    "type_name",
    "written_scan_bounds",
]


@attrs.frozen
class Agreement:
    """How one output compares with the reference value."""

    agrees: bool
    summary: str


#: What copies or reinterprets a value without computing: looked through to its producer.
_PASSING = ("bitcast", "copy", "get-tuple-element")


def _producer(source, leaf: int):
    """(fusion, its output leaf) that computes an entry output, or None (not a kernel's).

    Copy insertion puts a copy before results that would alias a parameter, a
    constant or another result; a copy moves bytes, so the fusion before it
    is the producer.
    """
    while source.opcode in _PASSING:
        if source.opcode == "get-tuple-element":
            inner = source.operands[0]
            if inner.opcode == "tuple":
                source = inner.operands[source.attr("index")]
                leaf = 0
                continue
            if inner.opcode == "fusion":
                return inner, int(source.attr("index"))
            return None
        source = source.operands[0]
    return (source, leaf) if source.opcode == "fusion" else None


def _fusions_reaching(instruction) -> list:
    """The fusion instructions ``instruction`` is or depends on: within its computation,
    and inside the loops' and conditionals' computations it depends on."""
    seen: set[object] = set()  # instructions hash by identity
    found, stack = [], [instruction]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.opcode == "fusion":
            found.append(current)
        else:  # a fusion's own computation holds no fusion; a loop's body does
            for called in current.called_computations():
                stack.extend(called.instructions)
        stack.extend(current.operands)
    return found


def _ulps_into(operand) -> int:
    """The ulps an earlier kernel's approximations may leave in a fusion's ``operand``
    (0 for a tuple or a non-float)."""
    from heron.harness.tolerance import ulp_bound
    from heron.hlo.shapes import ArrayShape

    if not isinstance(operand.shape, ArrayShape):
        return 0
    return ulp_bound(operand, operand.shape.element_type)


def _cached(cache: dict, entry, instruction, arguments):
    if instruction not in cache:  # instructions hash by identity
        from heron.harness.reference_values import value_of

        cache[instruction] = value_of(entry, instruction, arguments)
    return cache[instruction]


def _operand_values(entry, sources, needed, arguments) -> dict:
    """The reference values of the operands of every fusion that computes a needed output,
    by instruction, from one evaluation of ``entry`` (:func:`values_of`); empty where
    that evaluation fails (over the memory budget, say): each is then evaluated alone
    when asked (:func:`_cached`), and an output whose operands fail gets no
    per-element summation bound, as before."""
    from heron.harness.reference_values import values_of
    from heron.harness.tolerance import leaf_of
    from heron.hlo.errors import HloError

    operands: dict[object, None] = {}
    for k, source in enumerate(sources):
        if needed is not None and k < len(needed) and not needed[k]:
            continue
        produced = _producer(source, leaf_of(sources, k))
        if produced is not None:
            operands.update(dict.fromkeys(produced[0].operands))
    if not operands:
        return {}
    try:
        return dict(zip(operands, values_of(entry, list(operands), arguments), strict=True))
    except HloError:
        return {}


def output_tolerances(
    module,
    reorders: dict[str, bool],
    arguments,
    given,
    *,
    tf32: bool,
    written=None,
    needed: Sequence[bool] | None = None,
) -> list:
    """Per flattened entry output: :func:`heron.harness.tolerance.output_tolerance`.

    An output computed by a fusion is judged as ``heron check`` judges that
    fusion on the values it was given; fusions before it widen that by their
    own ulps and by a reordered sum (see the module docstring). ``tf32``: the
    Target's :attr:`heron.target.target.Target.tf32`, for the program's dots.
    ``written``: the module as written (before the compiler's passes), whose
    cumulative sums bound their regrouped outputs per element
    (:func:`written_scan_bounds`). ``needed``: per output, whether its tolerance is
    wanted (:func:`bitwise_agreements`: an output equal to the reference bitwise needs
    none, and the values of its fusion's operands are not evaluated for it).
    """
    from heron.harness.tolerance import (
        ErrorBounds,
        OutputTolerance,
        leaf_of,
        output_sources,
        output_tolerance,
        ulp_bound,
    )
    from heron.hlo.errors import HloError
    from heron.hlo.fusion_outputs import output_roots
    from heron.hlo.shapes import TupleShape

    given = given or ErrorBounds()
    entry = module.entry
    root = entry.root_instruction
    shapes = list(root.shape.leaves()) if isinstance(root.shape, TupleShape) else [root.shape]
    sources = output_sources(root)
    tolerances = []
    cache = _operand_values(entry, sources, needed, arguments)  # the fusions' operands
    for k, (source, shape) in enumerate(zip(sources, shapes, strict=False)):
        if needed is not None and k < len(needed) and not needed[k]:
            tolerances.append(OutputTolerance())  # bitwise: it is equal already
            continue
        element = shape.element_type
        leaf = leaf_of(sources, k)
        produced = _producer(source, leaf)
        upstream = _fusions_reaching(source)
        reordering = any(reorders.get(f.name, False) for f in upstream)
        if produced is None:
            tolerances.append(
                output_tolerance(source, element, given, reordering=reordering, tf32=tf32)
            )
            continue
        fusion, j = produced
        computation = fusion.called("calls")
        roots = output_roots(computation)
        inner = roots[j]
        inner_leaf = leaf_of(roots, j)
        try:
            values = [_cached(cache, entry, operand, arguments) for operand in fusion.operands]
        except HloError:  # e.g. over the memory budget: no per-element summation bound
            values = None
        own = reorders.get(fusion.name, False)
        reduction = (inner, computation, values) if values is not None else None
        before = [f for f in upstream if f is not fusion]
        tolerance = output_tolerance(
            inner,
            element,
            given,
            reordering=own,
            reduction=reduction,
            tf32=tf32,
            leaf=inner_leaf,
            parameter_ulps=[_ulps_into(operand) for operand in fusion.operands] if before else (),
        )
        if before:  # what the kernels before this one may have changed
            ulps = max(tolerance.ulps, ulp_bound(source, element))
            if not tolerance.reordered:  # a reordered sum or a dot before it widens it
                wider = output_tolerance(source, element, given, reordering=reordering, tf32=tf32)
                # (the ties and orders this kernel's own values allow stay)
                tolerance = attrs.evolve(
                    tolerance, ulps=ulps, bounds=wider.bounds, reordered=wider.reordered
                )
            else:
                tolerance = attrs.evolve(tolerance, ulps=ulps)
        tolerances.append(tolerance)
    if written is not None:
        tolerances = _with_scan_bounds(tolerances, written_scan_bounds(written, arguments))
        tolerances = _with_written_sums(tolerances, written, arguments)
        tolerances = _with_written_sort_slices(tolerances, written, arguments)
        tolerances = _with_loop_propagation(tolerances, written, arguments)
    return tolerances


@attrs.define(eq=False)
class WrittenSum:
    """Output ``source`` of the module as written (its ``entry``) is a float sum carried
    to it (through converts, negates, a constant factor: ``jnp.mean``'s divide): its
    summation bound per element (:func:`heron.harness.tolerance.summation_bound`),
    computed when the other bounds refuse an element.

    The compiled module may sum it in a kernel before the output's own: CSE made one
    reduce of ``sum(u)``, ``mean(u)`` and ``sum(u) * 0.5``, and the divide and the
    multiply a loop kernel after it, which has no sum to bound; the fixed
    reassociation bound (1e-4 of the value) refused a sum of 300 values of 1e4
    cancelling to 0.37 (a helper's sweep).
    """

    entry: object
    source: object
    arguments: list
    _bound: object = attrs.field(default=None, init=False)
    _done: bool = attrs.field(default=False, init=False)

    def accepts(self, kernel: np.ndarray, reference: np.ndarray) -> np.ndarray:
        from heron.harness.tolerance import ErrorBounds, summation_bound
        from heron.hlo.errors import HloError

        kernel = np.asarray(kernel).reshape(-1)
        if not self._done:
            try:
                self._bound = summation_bound(self.source, self.entry, self.arguments)
            except HloError:
                self._bound = None
            self._done = True
        if self._bound is None or self._bound.size not in (1, kernel.size):
            return np.zeros(kernel.size, np.bool_)
        bounds = ErrorBounds(per_element=self._bound)
        return bounds.accepts(kernel, np.asarray(reference).reshape(-1))


def _with_written_sums(tolerances: list, written, arguments) -> list:
    """Each reordered output that is a sum in the module as written also accepts that
    sum's bound (:class:`WrittenSum`)."""
    from heron.harness.tolerance import output_sources

    sources = output_sources(written.entry.root_instruction)
    if len(sources) != len(tolerances) or arguments is None:
        return tolerances
    return [
        attrs.evolve(tolerance, summed=WrittenSum(written.entry, source, list(arguments)))
        if tolerance.reordered and source.opcode != "parameter"
        else tolerance
        for source, tolerance in zip(sources, tolerances, strict=True)
    ]


def _with_written_sort_slices(tolerances: list, written, arguments) -> list:
    """Each output that is, in the module as written, a slice of a sort's output whose
    order the sort leaves open (:func:`heron.harness.sort_orders.sort_freedom`: a top-k
    as ``jax.lax.approx_max_k`` lowers it) takes that freedom. The compiled program
    sorts in one kernel and slices in another, whose body holds no sort to look at."""
    from heron.harness.sort_orders import sort_freedom
    from heron.harness.tolerance import output_sources

    if arguments is None or not any(
        inst.opcode == "sort" for c in written.computations for inst in c.instructions
    ):
        return tolerances
    entry = _inlined_copy(written).entry
    sources = output_sources(entry.root_instruction)
    if len(sources) != len(tolerances):
        return tolerances
    freed = []
    for source, tolerance in zip(sources, tolerances, strict=True):
        if tolerance.orders is None and source.opcode == "slice":
            freedom = sort_freedom(source, entry, list(arguments))
            if freedom is not None:
                tolerance = attrs.evolve(tolerance, orders=freedom)
        freed.append(tolerance)
    return freed


def _inlined_copy(written):
    """A copy of ``written`` with its calls inlined, as the compiler inlines them (jax
    wraps a sort or a cumulative sum in a call); the caller keeps its module."""
    from heron.hlo.parser import parse_module
    from heron.hlo.passes.call_inliner import inline_calls
    from heron.hlo.printer import print_module

    inlined = parse_module(print_module(written))
    inline_calls(inlined)
    return inlined


def _with_loop_propagation(tolerances: list, written, arguments) -> list:
    """Each output that a loop or conditional of the module as written reaches also
    accepts, with an ulp bound, the approximations' errors as every trip of the loops
    carries them on (:mod:`heron.harness.unrolled`), measured on the unrolled program
    where the ulp bound refuses an element; and each output a loop, a conditional or a
    decision on floats reaches (a comparison, a conversion to an integer), whatever its
    type, any value within the spread of random roundings of the reference where they
    change the program's decisions (:mod:`heron.harness.random_rounding`)."""
    from heron.harness.random_rounding import RandomRoundings, RoundingFreedom, decides
    from heron.harness.tolerance import instructions_reaching, output_sources, own_ulps
    from heron.harness.unrolled import LoopErrorPropagation, UnrolledProgram, has_control_flow

    entry = written.entry
    sources = output_sources(entry.root_instruction)
    if len(sources) != len(tolerances) or arguments is None:
        return tolerances
    program = UnrolledProgram(entry, arguments)
    roundings = RandomRoundings(written, arguments)
    widened = list(tolerances)
    for k, (source, tolerance) in enumerate(zip(sources, tolerances)):
        reaching = instructions_reaching(source)
        looped = has_control_flow(reaching)
        if looped and tolerance.ulps:
            tolerance = attrs.evolve(
                tolerance, amplified=LoopErrorPropagation(program, k, own_ulps)
            )
        if tolerance.reordered or looped or any(decides(inst) for inst in reaching):
            freedom = RoundingFreedom(roundings, k, reordered=tolerance.reordered)
            widened[k] = attrs.evolve(tolerance, rounding=freedom)
    return widened


def written_scan_bounds(written, arguments) -> list:
    """Per flattened entry output of ``written`` (a module before the compiler's passes):
    :func:`heron.harness.tolerance.scan_summation_bound` of a cumulative sum it is, or None.

    The scan rewriter splits a long cumsum into blocks and a sum of their totals, so
    in the compiled module no instruction holds the prefix whose ``sum|x_i|`` bounds
    how far the blocks' order may be from the reference's sequential one; the
    module as written does (its calls inlined, as the compiler inlines them).
    """
    from heron.compiler.scan_rewriter import scan_of
    from heron.harness.tolerance import output_sources, scan_summation_bound
    from heron.hlo.errors import HloError
    from heron.hlo.shapes import TupleShape

    root = written.entry.root_instruction
    count = len(list(root.shape.leaves())) if isinstance(root.shape, TupleShape) else 1
    if not any(scan_of(i) for c in written.computations for i in c.instructions):
        return [None] * count
    entry = _inlined_copy(written).entry
    bounds = []
    for source in output_sources(entry.root_instruction):
        try:
            bounds.append(scan_summation_bound(source, entry, arguments))
        except HloError:  # e.g. over the memory budget: the fixed bounds only
            bounds.append(None)
    return bounds


def _with_scan_bounds(tolerances: list, bounds: list) -> list:
    """``tolerances`` whose reordered outputs also accept their scan's bound."""
    merged = []
    for tolerance, bound in zip(tolerances, bounds, strict=True):
        if bound is not None and tolerance.reordered:
            own = tolerance.bounds.per_element
            per_element = bound if own is None else np.maximum(own, bound)
            tolerance = attrs.evolve(
                tolerance, bounds=attrs.evolve(tolerance.bounds, per_element=per_element)
            )
        merged.append(tolerance)
    return merged


def bitwise_agreements(actual: list, expected: list) -> list[bool]:
    """Per output, whether it agrees with the reference at the bitwise tolerance: such
    an output needs no tolerance decided (:func:`output_tolerances` ``needed``).
    Deciding one evaluates the reference again (the values its kernel's operands take,
    random roundings, unrolled loops): 91 s of a 136 s check of a jaxns program whose
    outputs but three were identical (the seventeenth sweep)."""
    return [compare(a, e).agrees for a, e in zip(actual, expected, strict=False)]


def compare(actual: object, expected: object, tolerance=None) -> Agreement:
    """``actual`` against the reference ``expected`` under ``tolerance`` (default bitwise).

    ``tolerance`` is a :class:`heron.harness.tolerance.OutputTolerance`, as
    :func:`output_tolerances` decides it.
    """
    from heron.harness.tolerance import OutputTolerance

    tolerance = tolerance or OutputTolerance()
    if not isinstance(expected, np.ndarray) or not isinstance(actual, np.ndarray):
        same = type(actual) is type(expected)
        return Agreement(same, "no value (token)" if same else "kinds differ")
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return Agreement(
            False,
            f"{type_name(actual)}{list(actual.shape)} where the reference is"
            f" {type_name(expected)}{list(expected.shape)}",
        )
    if actual.size == 0:
        return Agreement(True, "empty")
    found = tolerance.mismatches(actual, expected)
    if expected.dtype.kind == "c" or _is_float(expected.dtype):
        summary = _float_summary(actual, expected) + f" (allowed: {tolerance.describe()})"
    elif found.count:
        summary = f"{found.count} of {expected.size} elements differ (must be exact)"
    elif differing := int(np.count_nonzero(actual != expected)):  # a tolerance took them
        allowed = tolerance.describe()
        summary = f"{differing} of {expected.size} elements differ (allowed: {allowed})"
    else:
        summary = "identical"
    if found.count:
        from heron.harness.tolerance import NAN_DISTANCE, describe_value

        first = int(found.indices[0])
        index = tuple(int(i) for i in np.unravel_index(first, expected.shape))
        distance = int(found.distances[0])
        how = "NaN against a number" if distance >= NAN_DISTANCE else f"{distance} ulps"
        if not (expected.dtype.kind == "c" or _is_float(expected.dtype)):
            how = "must be exact"
        summary += (
            f"; {found.count} of {expected.size} outside the tolerance, first at {index}:"
            f" {describe_value(actual, first)} where the reference has"
            f" {describe_value(expected, first)} ({how})"
        )
        return Agreement(False, summary)
    return Agreement(True, summary + _accepted_nans(actual, expected, tolerance))


def _accepted_nans(actual: np.ndarray, expected: np.ndarray, tolerance) -> str:
    """For an output that agrees with NaNs where the reference has numbers: how many,
    the first, and why it was accepted (as many random roundings of the reference give
    NaN there: a decision rounding flips, such as a tie that a ``where`` guards, whose
    other branch is NaN). "max |difference| inf" alone read as a wrong answer let
    through: the fifteenth sweep's jax-galsim gradient (an Akima interpolation's
    gradient is NaN where two slopes tie, and which tie depends on a grid's last ulp)."""
    from heron.harness.tolerance import describe_value

    if not (expected.dtype.kind == "c" or _is_float(expected.dtype)):
        return ""
    wide_actual = actual.astype(np.complex128 if actual.dtype.kind == "c" else np.float64)
    wide_expected = expected.astype(wide_actual.dtype)
    where = (np.isnan(wide_actual) & ~np.isnan(wide_expected)).reshape(-1)
    if not where.any():
        return ""
    first = int(np.flatnonzero(where)[0])
    index = tuple(int(i) for i in np.unravel_index(first, expected.shape))
    note = (
        f"; {int(where.sum())} of {expected.size} NaN where the reference has a number,"
        f" first at {index} (the reference: {describe_value(expected, first)})"
    )
    seen = tolerance.rounding.nan_roundings(first) if tolerance.rounding is not None else None
    if seen is not None and seen[0]:
        note += f", as {seen[0]} of {seen[1]} random roundings of the reference give there"
    return note


def _is_float(dtype: np.dtype) -> bool:
    import ml_dtypes

    try:
        ml_dtypes.finfo(dtype)
    except ValueError:
        return False
    return True


def _float_summary(actual: np.ndarray, expected: np.ndarray) -> str:
    """``max N ulp, max |difference| D`` (complex: over the real and imaginary parts)."""
    from heron.harness.tolerance import NAN_DISTANCE, ulp_distance

    if expected.dtype.kind == "c":
        parts = [(np.real(actual).copy(), np.real(expected).copy())]
        parts.append((np.imag(actual).copy(), np.imag(expected).copy()))
    else:
        parts = [(actual, expected)]
    worst_ulps, worst_difference = 0.0, 0.0
    for a, e in parts:
        distance = ulp_distance(a, e)
        ulps = np.where(distance >= NAN_DISTANCE, np.inf, distance.astype(np.float64))
        wide_a, wide_e = a.astype(np.float64), e.astype(np.float64)
        with np.errstate(invalid="ignore"):
            difference = np.where(np.isnan(wide_a) & np.isnan(wide_e), 0.0, np.abs(wide_a - wide_e))
            difference = np.where(wide_a == wide_e, 0.0, difference)  # same-signed infinities
        difference = np.where(np.isnan(difference), np.inf, difference)
        worst_ulps = max(worst_ulps, float(ulps.max()))
        worst_difference = max(worst_difference, float(difference.max()))
    return f"max {worst_ulps:.0f} ulp, max |difference| {worst_difference:.3g}"


def type_name(array: np.ndarray) -> str:
    from heron.hlo.element_types import ElementType

    try:
        return ElementType.from_numpy(array.dtype).value
    except ValueError:
        return str(array.dtype)
