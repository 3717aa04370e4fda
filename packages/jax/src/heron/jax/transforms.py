"""``heron.jax.jit`` under jax's transformations: grad, vjp, jvp, linearize, vmap, jit.

``jax.jit`` composes with every transformation because a jitted call is a primitive
(``pjit``) whose rules transform the function it calls, and the transformed function
is compiled in turn. A heron-jitted function called with jax's tracers (inside
``jax.grad``, ``jax.vmap``, ``jax.jit``, ...) does the same with a primitive of its
own, ``heron_call``: its parameters are the function as a jaxpr (traced at the
arguments' abstract values) and the :class:`~heron.jax.jit.HeronJitted` that called it,
whose options (backend, Target, cache, determinism) every derived program keeps.

- **Evaluated** (the primitive's implementation): heron compiles the jaxpr's function
  and runs it on the device, as a call of the heron-jitted function would.
- **Differentiated** (its JVP): the function linearized as :func:`jax.linearize` splits
  it, two ``heron_call`` calls: the primal results with the residuals their tangents need,
  and the tangents from those residuals, linear in the tangents. Reverse mode
  evaluates the first and transposes the second (below), so
  ``jax.grad(heron.jax.jit(f))(x)`` runs two heron programs, ``f`` with its residuals
  and the transpose of its derivative, and the forward runs once.
- **Transposed** (reverse mode): ``heron_call`` of :func:`jax.linear_transpose` of
  the function in the arguments the transpose leaves undefined, the others given.
- **Batched**: ``heron_call`` of :func:`jax.vmap` of the function, every result
  batched on its first axis.
- **Inside another compiler's trace** (``jax.jit``, or an enclosing
  ``heron.jax.jit``): lowered as the function itself, so the enclosing compile takes
  it in whole, as a nested ``jax.jit`` is inlined into the program around it.

Derived jaxprs (a JVP, a transpose, a batched form) and the programs compiled for them
are kept per heron-jitted function, keyed by the jaxpr they came from, so repeated
calls (a training loop's ``jax.grad(step)(params)``) trace and compile once; a
function that closes over another transformation's tracers is traced again at every
call, as jax does. ``heron.jax.jit(jax.grad(f))`` compiles the gradient as one program
and is the faster form where the choice is the user's.

Everything here goes through jax's documented extension points for primitives
(``jax.extend.core.Primitive``, ``jax.interpreters.ad``/``batching``/``mlir``) and
public transformations (:func:`jax.jvp`, :func:`jax.linear_transpose`, :func:`jax.vmap`).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from heron.jax.jit import HeronJitted

__all__ = ["DerivedPrograms", "heron_call", "remember_direct_trace", "traced_call"]


@attrs.define
class _Traced:
    """A function traced at one signature: its jaxpr and the pytree of its results."""

    jaxpr: Any
    out_tree: Any


def _bounded_put(cache: collections.OrderedDict, key: Any, value: Any, size: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)


@attrs.define
class DerivedPrograms:
    """What one heron-jitted function keeps of its calls under transformations: its
    traces per signature, the jaxprs derived from them (a JVP, a transpose, a batched
    form) and a heron-jitted function per jaxpr it ran. Each is keyed by the jaxpr
    object it came from, held here (so no other object can take its identity while its
    entry lives), and bounded: the oldest entry goes first."""

    #: At most this many entries in each table.
    size: int = 256
    traces: collections.OrderedDict = attrs.field(factory=collections.OrderedDict)
    derived: collections.OrderedDict = attrs.field(factory=collections.OrderedDict)
    programs: collections.OrderedDict = attrs.field(factory=collections.OrderedDict)

    def get(self, table: collections.OrderedDict, key: Any, make: Callable[[], Any]) -> Any:
        found = table.get(key)
        if found is None:
            found = make()
            _bounded_put(table, key, found, self.size)
        else:
            table.move_to_end(key)
        return found


@functools.cache
def heron_call() -> Any:
    """``heron_call`` with its rules, made at its first use: importing heron.jax (which its
    custom-call plugins do in every compile) must not import jax."""
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir

    primitive = Primitive("heron_call")
    primitive.multiple_results = True
    primitive.def_impl(_run)
    primitive.def_effectful_abstract_eval(_abstract_eval)
    ad.primitive_jvps[primitive] = _jvp
    ad.primitive_transposes[primitive] = _transpose
    batching.primitive_batchers[primitive] = _batch
    mlir.register_lowering(primitive, mlir.lower_fun(_inline, multiple_results=True))
    return primitive


# -- calling ---------------------------------------------------------------------------------


def traced_call(jitted: HeronJitted, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``jitted(*args, **kwargs)`` where some argument is a tracer: ``heron_call`` of the
    function traced at the arguments' abstract values, in the function's result pytree."""
    import jax
    from jax.core import Tracer

    from heron.jax.lowering import signature_of, split_static

    dynamic_args, dynamic_kwargs, static = split_static(
        args, kwargs, jitted.static_argnums, jitted.static_argnames
    )
    leaves, in_tree = jax.tree_util.tree_flatten((tuple(dynamic_args), dict(dynamic_kwargs)))
    key = signature_of(dynamic_args, dynamic_kwargs, static, traced=True)
    derived = jitted.derived_programs
    traced = derived.traces.get(key)
    hoisted: list[Any] = []
    if traced is None:
        flat = _flat_function(jitted.function, jitted, args, kwargs, in_tree)
        closed, out_shapes = jax.make_jaxpr(flat, return_shape=True)(*leaves)
        closed, hoisted = _hoist_tracers(closed, Tracer)
        traced = _Traced(closed, jax.tree_util.tree_structure(out_shapes))
        if not hoisted:  # a closure over another trace's values is traced at every call
            _bounded_put(derived.traces, key, traced, derived.size)
    outputs = heron_call().bind(
        *hoisted, *leaves, jaxpr=traced.jaxpr, jitted=jitted, name=_function_name(jitted)
    )
    return jax.tree_util.tree_unflatten(traced.out_tree, outputs)


def _flat_function(
    function: Callable[..., Any],
    jitted: HeronJitted,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    in_tree: Any,
) -> Callable[..., Any]:
    """``function`` (the jitted one's, or ``jitted`` itself) of the dynamic arguments'
    leaves, the static ones as this call gives them."""
    import jax

    from heron.jax.lowering import static_positions

    positions, names = static_positions(
        len(args), kwargs, jitted.static_argnums, jitted.static_argnames
    )
    # Only the static values are kept (a kept function must not hold this call's tracers).
    count = len(args)
    static_args = {n: args[n] for n in positions}
    static_kwargs = {name: kwargs[name] for name in names}

    def flat(*leaves: Any) -> Any:
        dynamic_args, dynamic_kwargs = jax.tree_util.tree_unflatten(in_tree, leaves)
        given = iter(dynamic_args)
        full = [static_args[n] if n in static_args else next(given) for n in range(count)]
        return function(*full, **dynamic_kwargs, **static_kwargs)

    return flat


def remember_direct_trace(jitted: HeronJitted, key: Any, compiled: Any) -> None:
    """Keep a direct call's trace and program for the transformations of later calls.

    jax traces a jitted function once per signature, and a function may count on it: one
    that caches an array it computes on first use (netket's operators do) leaves a
    tracer of that first trace in the cache, which ``jax.grad(jax.jit(f))`` never reads
    again. A transformed call at this signature takes this trace (``traced_call``) and
    evaluates its jaxpr with this program, so neither traces the Python function again
    (``jax.grad(f)`` after ``f(x)`` linearizes that trace; a call whose tangents are all
    zero runs this program).
    """
    import jax

    from heron.jax.arrays import as_jax_arrays

    lowered = compiled.lowered
    if lowered.jaxpr is None:
        return
    derived = jitted.derived_programs
    _bounded_put(derived.traces, key, _Traced(lowered.jaxpr, lowered.out_tree), derived.size)

    def run(*leaves: Any) -> list[Any]:
        dynamic_args, dynamic_kwargs = jax.tree_util.tree_unflatten(lowered.in_tree, leaves)
        arguments = lowered.argument_leaves(dynamic_args, dynamic_kwargs)
        outputs = as_jax_arrays(compiled.runner(arguments, donate=()))
        return jax.tree_util.tree_leaves(lowered.unflatten_results(outputs))

    _bounded_put(derived.programs, lowered.jaxpr, run, derived.size)


def _hoist_tracers(closed: Any, tracer_type: type) -> tuple[Any, list[Any]]:
    """``closed`` with its constants that are tracers (values the function closes over
    from an enclosing transformation) made its first parameters, and those tracers: a
    primitive's parameters cannot hold another trace's values."""
    from jax.extend.core import ClosedJaxpr

    hoist = [isinstance(const, tracer_type) for const in closed.consts]
    if not any(hoist):
        return closed, []
    jaxpr = closed.jaxpr
    kept_vars = [v for v, h in zip(jaxpr.constvars, hoist, strict=True) if not h]
    kept = [c for c, h in zip(closed.consts, hoist, strict=True) if not h]
    hoisted_vars = [v for v, h in zip(jaxpr.constvars, hoist, strict=True) if h]
    hoisted = [c for c, h in zip(closed.consts, hoist, strict=True) if h]
    debug = jaxpr.debug_info.with_unknown_names() if jaxpr.debug_info is not None else None
    lifted = jaxpr.replace(
        constvars=kept_vars, invars=[*hoisted_vars, *jaxpr.invars], debug_info=debug
    )
    return ClosedJaxpr(lifted, kept), hoisted


def _function_name(jitted: HeronJitted) -> str:
    return getattr(jitted.function, "__name__", None) or type(jitted.function).__name__


# -- the rules -------------------------------------------------------------------------------


def _abstract_eval(*avals: Any, jaxpr: Any, jitted: Any, name: str) -> tuple[list[Any], Any]:
    return list(jaxpr.out_avals), jaxpr.effects


def _run(*args: Any, jaxpr: Any, jitted: HeronJitted, name: str) -> list[Any]:
    """Evaluate: the jaxpr's function compiled by heron with ``jitted``'s options, run
    (the jaxpr itself, never the Python function traced again: a direct call's program
    where the jaxpr is that call's trace, :func:`remember_direct_trace`)."""
    program = jitted.derived_programs.get(
        jitted.derived_programs.programs, jaxpr, lambda: jitted.for_jaxpr(jaxpr, name)
    )
    return list(program(*args))


def _inline(*args: Any, jaxpr: Any, jitted: Any, name: str) -> list[Any]:
    """Lowered inside another trace: the function itself."""
    from jax.extend.core import jaxpr_as_fun

    return jaxpr_as_fun(jaxpr)(*args)


def _jvp(
    primals: Sequence[Any], tangents: Sequence[Any], *, jaxpr: Any, jitted: Any, name: str
) -> tuple[list[Any], list[Any]]:
    """The results and their tangents as two heron programs, the function linearized:
    the first computes the results and the residuals the tangents need (the primal work,
    once), the second the tangents from the residuals, linear in the tangents given. In
    reverse mode jax evaluates the first and transposes the second, so the backward
    program does not compute the forward again."""
    from jax.interpreters import ad

    nonzero = tuple(
        not isinstance(t, ad.Zero) and _differentiable(aval)
        for t, aval in zip(tangents, jaxpr.in_avals, strict=True)
    )
    differentiable = tuple(_differentiable(aval) for aval in jaxpr.out_avals)
    zeros = [ad.Zero(aval.to_tangent_aval()) for aval in jaxpr.out_avals]
    if not any(nonzero) or not any(differentiable):
        outputs = heron_call().bind(*primals, jaxpr=jaxpr, jitted=jitted, name=name)
        return outputs, zeros
    split = jitted.derived_programs.get(
        jitted.derived_programs.derived,
        (jaxpr, "linearize", nonzero),
        lambda: _linearized(jaxpr, nonzero, differentiable),
    )
    known = heron_call().bind(*primals, jaxpr=split.known, jitted=jitted, name=name)
    count = len(jaxpr.out_avals)
    outputs, residuals = known[:count], known[count:]
    given = [t for t, nz in zip(tangents, nonzero, strict=True) if nz]
    computed = iter(
        heron_call().bind(
            *residuals, *given, jaxpr=split.tangents, jitted=jitted, name=f"jvp({name})"
        )
    )
    return outputs, [next(computed) if d else z for d, z in zip(differentiable, zeros, strict=True)]


@attrs.frozen
class _Linearized:
    """A function split as :func:`jax.linearize` splits it: ``known`` maps the primals to
    the results followed by the residuals; ``tangents`` maps the residuals and the
    nonzero tangents to the differentiable results' tangents, linearly in the
    tangents."""

    known: Any
    tangents: Any


def _linearized(jaxpr: Any, nonzero: Sequence[bool], differentiable: Sequence[bool]) -> _Linearized:
    """``jaxpr`` linearized in its ``nonzero`` arguments (the others held): traced once
    with :func:`jax.linearize`, whose linear function closes over the residuals as values
    of the primal trace; those become the primal jaxpr's extra results and the tangent
    jaxpr's first arguments."""
    import jax
    from jax.core import Tracer
    from jax.extend.core import jaxpr_as_fun

    function = jaxpr_as_fun(jaxpr)
    avals = jaxpr.in_avals
    tangent_specs = [
        _spec(aval.to_tangent_aval()) for aval, nz in zip(avals, nonzero, strict=True) if nz
    ]
    linear: list[Any] = []  # the tangent jaxpr, out of the primal trace

    def known(*primals: Any) -> list[Any]:
        held = [p for p, nz in zip(primals, nonzero, strict=True) if not nz]

        def of_varying(*varying: Any) -> list[Any]:
            return function(*_merge(nonzero, varying, held))

        varying = [p for p, nz in zip(primals, nonzero, strict=True) if nz]
        outputs, tangents_of = jax.linearize(of_varying, *varying)

        def differentiable_tangents(*tangents: Any) -> list[Any]:
            out = tangents_of(*tangents)
            return [t for t, d in zip(out, differentiable, strict=True) if d]

        closed = jax.make_jaxpr(differentiable_tangents)(*tangent_specs)
        linear.append(closed)
        return [*outputs, *(c for c in closed.consts if isinstance(c, Tracer))]

    known_jaxpr = jax.make_jaxpr(known)(*[_spec(aval) for aval in avals])
    tangents, _ = _hoist_tracers(linear[0], Tracer)
    return _Linearized(known_jaxpr, tangents)


def _transpose(cotangents: Sequence[Any], *args: Any, jaxpr: Any, jitted: Any, name: str) -> list:
    """The cotangents of the arguments the transpose leaves undefined (the linear ones),
    computed by heron from the others and the results' cotangents."""
    import jax.numpy as jnp
    from jax.interpreters import ad

    linear = tuple(ad.is_undefined_primal(a) for a in args)
    for a, aval in zip(args, jaxpr.in_avals, strict=True):
        if ad.is_undefined_primal(a) and not _differentiable(aval):
            raise TypeError(
                f"heron.jax.jit({name}): transposed in an argument of type {aval.str_short()},"
                " which has no cotangent (only floating and complex arguments are linear)"
            )
    differentiable = tuple(_differentiable(aval) for aval in jaxpr.out_avals)
    if all(isinstance(ct, ad.Zero) for ct, d in zip(cotangents, differentiable) if d):
        return [None] * len(args)
    given = [a for a, lin in zip(args, linear, strict=True) if not lin]
    cts = [
        jnp.zeros(aval.shape, aval.dtype) if isinstance(ct, ad.Zero) else ct
        for ct, aval, d in zip(cotangents, jaxpr.out_avals, differentiable, strict=True)
        if d
    ]
    transposed = jitted.derived_programs.get(
        jitted.derived_programs.derived,
        (jaxpr, "transpose", linear),
        lambda: _transposed_jaxpr(jaxpr, linear, differentiable),
    )
    computed = iter(
        heron_call().bind(*given, *cts, jaxpr=transposed, jitted=jitted, name=f"transpose({name})")
    )
    return [next(computed) if lin else None for lin in linear]


def _transposed_jaxpr(jaxpr: Any, linear: Sequence[bool], differentiable: Sequence[bool]) -> Any:
    """The jaxpr of ``(given arguments, results' cotangents) -> linear arguments'
    cotangents``: :func:`jax.linear_transpose` of the function in its linear arguments."""
    import jax
    from jax.extend.core import jaxpr_as_fun

    function = jaxpr_as_fun(jaxpr)
    avals = jaxpr.in_avals
    linear_specs = [_spec(a) for a, lin in zip(avals, linear, strict=True) if lin]
    given_count = len(avals) - len(linear_specs)

    def transposed_function(*values: Any) -> list[Any]:
        given, cts = values[:given_count], list(values[given_count:])

        def of_linear(*linear_values: Any) -> list[Any]:
            return [
                out
                for out, d in zip(
                    function(*_merge(linear, linear_values, given)), differentiable, strict=True
                )
                if d
            ]

        return list(jax.linear_transpose(of_linear, *linear_specs)(cts))

    given_specs = [_spec(a) for a, lin in zip(avals, linear, strict=True) if not lin]
    ct_specs = [_spec(a) for a, d in zip(jaxpr.out_avals, differentiable, strict=True) if d]
    return jax.make_jaxpr(transposed_function)(*given_specs, *ct_specs)


def _merge(chosen: Sequence[bool], when_chosen: Sequence[Any], otherwise: Sequence[Any]) -> list:
    """One list of two in order: the next of ``when_chosen`` where ``chosen``, else the next
    of ``otherwise``."""
    first, second = iter(when_chosen), iter(otherwise)
    return [next(first) if c else next(second) for c in chosen]


def _batch(
    args: Sequence[Any], dims: Sequence[Any], *, jaxpr: Any, jitted: Any, name: str
) -> tuple[list[Any], list[int]]:
    """vmap: ``heron_call`` of the function vmapped over the batched arguments' axes."""
    axes = tuple(None if d is None else int(d) for d in dims)  # None: not batched
    size = next(a.shape[d] for a, d in zip(args, axes, strict=True) if d is not None)
    batched = jitted.derived_programs.get(
        jitted.derived_programs.derived,
        (jaxpr, "vmap", axes, size),
        lambda: _batched_jaxpr(jaxpr, axes, size),
    )
    outputs = heron_call().bind(*args, jaxpr=batched, jitted=jitted, name=f"vmap({name})")
    return list(outputs), [0] * len(outputs)


def _batched_jaxpr(jaxpr: Any, axes: Sequence[int | None], size: int) -> Any:
    import jax
    from jax.extend.core import jaxpr_as_fun

    specs = []
    for aval, axis in zip(jaxpr.in_avals, axes, strict=True):
        shape = list(aval.shape)
        if axis is not None:
            shape.insert(axis, size)
        specs.append(jax.ShapeDtypeStruct(tuple(shape), aval.dtype, weak_type=aval.weak_type))
    return jax.make_jaxpr(jax.vmap(jaxpr_as_fun(jaxpr), in_axes=axes, out_axes=0))(*specs)


# -- abstract values --------------------------------------------------------------------------


def _differentiable(aval: Any) -> bool:
    """Whether values of ``aval`` have tangents (floating and complex types do; integers,
    booleans and keys have float0 ones)."""
    import jax

    dtype = getattr(aval, "dtype", None)
    return dtype is not None and jax.numpy.issubdtype(dtype, jax.numpy.inexact)


def _spec(aval: Any) -> Any:
    import jax

    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)
