"""From a JAX function and its arguments to the module heron compiles, and back to pytrees.

jax traces and lowers the function for the platform the program will run on
(:func:`platform_for`: the GPU's own where it runs on CUDA or ROCm, the CPU's
on the interpreter; no device of it is needed). The pre-optimization HLO
differs between platforms only in the custom calls jax picks (LAPACK on the
CPU, cuSOLVER and cuFFT on CUDA): a GPU's are refused by name where no
installed ``heron.custom_calls`` plugin runs them. The HLO text is what
``jax.jit(f).lower(...)`` prints, the same text the program corpus holds. The entry's parameters are
the leaves of ``(args, kwargs)`` in ``jax.tree_util`` order (static arguments
excluded), and its result leaves those of the function's output pytree: the
two tree definitions jax reports are kept so that numbers go in and come out
in the user's structure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from heron.hlo.ir import Module
from heron.hlo.parser import parse_module

# jax is imported in the functions that use it: importing this package (its custom-call
# plugins, which every compile of a module with a custom call loads) must not import jax
# (a second or more).

__all__ = [
    "PLATFORMS",
    "Lowered",
    "Signature",
    "TracedCall",
    "lower",
    "platform_for",
    "resolve_argnums_and_argnames",
    "signature_of",
    "split_static",
    "static_positions",
]


class TracedCall(Exception):
    """A call's arguments hold jax tracers, or its function closes over some: the call is
    a transformation's, staged rather than run (:func:`heron.jax.transforms.traced_call`)."""


@attrs.frozen
class Signature:
    """What a compiled program depends on besides the function: the arguments' tree,
    each leaf's shape, dtype and weak-typedness (a Python scalar is weakly typed and
    lowers differently), and the static arguments' values."""

    tree: Any
    leaves: tuple[tuple[tuple[int, ...], str, bool], ...]
    static: tuple[Any, ...] = ()


def _leaf_spec(leaf: Any) -> tuple[tuple[int, ...], str, bool]:
    """A leaf's shape, dtype and weak-typedness, as jax's abstract value gives them: a
    Python scalar and a weakly typed ``jax.Array`` (``jnp.asarray(0.1)``) promote to the
    other operand's type where a strongly typed one wins, so jax lowers them apart."""
    import jax

    if isinstance(leaf, jax.Array):  # most calls' leaves: the abstract value it holds
        aval = leaf.aval
        return aval.shape, _dtype_name(aval.dtype), aval.weak_type
    aval = jax.typeof(_abstract(leaf))
    weak = bool(getattr(aval, "weak_type", False))
    return tuple(int(d) for d in aval.shape), _dtype_name(aval.dtype), weak


@functools.cache
def _dtype_name(dtype: Any) -> str:
    """``str(dtype)``, once per dtype: every call's signature names each leaf's (4 us a
    leaf through ``jax.typeof`` and ``str``; a model's step has hundreds of leaves)."""
    return str(dtype)


def _abstract(leaf: Any) -> Any:
    """``leaf`` as jax traces it: an array jax does not know (a heron DeviceArray, another
    library's device array) by its shape and dtype, anything else as it is."""
    import jax

    if isinstance(leaf, (jax.Array, np.ndarray, np.generic, bool, int, float, complex)):
        return leaf
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        return jax.ShapeDtypeStruct(tuple(leaf.shape), np.dtype(leaf.dtype))
    return leaf


def signature_of(
    args: Sequence[Any],
    kwargs: dict[str, Any],
    static: tuple[Any, ...] = (),
    *,
    traced: bool = False,
) -> Signature:
    """The signature of one call (the cache key of its compiled program). A leaf that is
    a jax tracer (the call is inside ``jax.grad``, ``jax.vmap``, ``jax.jit``, ...) raises
    :class:`TracedCall` unless ``traced``: such a call is not run
    but staged (:func:`heron.jax.transforms.traced_call`)."""
    import jax
    from jax.core import Tracer

    leaves, tree = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)))
    if not traced and any(isinstance(leaf, Tracer) for leaf in leaves):
        raise TracedCall
    return Signature(tree, tuple(_leaf_spec(leaf) for leaf in leaves), static)


@attrs.frozen
class Lowered:
    """A function lowered for one signature: the HLO text, the parsed module, and the
    pytree structures of its arguments (``(args, kwargs)``) and of its result."""

    name: str
    hlo_text: str
    module: Module = attrs.field(repr=False)
    in_tree: Any
    out_tree: Any
    #: The Python functions of the lowering's callbacks (``jax.debug.print``,
    #: ``pure_callback``), by their ``backend_config`` index (heron.jax.host_callbacks).
    host_callbacks: tuple[Callable[..., Any], ...] = attrs.field(default=(), repr=False)
    #: Per result leaf, the PRNG implementation of a typed key (``jax.random.key``),
    #: else None: the entry returns the key's data (``u32[..., 2]`` for threefry), and
    #: the caller gets a key back (:meth:`unflatten_results`).
    result_keys: tuple[Any, ...] = attrs.field(default=(), repr=False)
    #: jax's trace of the function at this signature (a ``ClosedJaxpr`` over the dynamic
    #: arguments' leaves), or None where the function was traced over its leaves: the
    #: trace a later transformation of the same call reuses (heron.jax.transforms), as
    #: jax.jit traces a function once per signature.
    jaxpr: Any = attrs.field(default=None, repr=False, eq=False)

    def flatten_arguments(self, args: Sequence[Any], kwargs: dict[str, Any]) -> list[np.ndarray]:
        """The entry's arguments: the leaves of ``(args, kwargs)`` as numpy arrays, each of
        the dtype jax lowered it as (``jax.dtypes.canonicalize_dtype``: without
        ``jax_enable_x64`` an int64 or float64 argument is an s32 or f32 parameter, and
        jax converts the value as ``astype`` does, so heron does the same)."""
        import jax

        leaves, tree = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)))
        if tree != self.in_tree:
            raise TypeError(
                f"heron.jax: arguments of structure {tree} given to '{self.name}',"
                f" lowered for {self.in_tree}"
            )
        arrays = [np.asarray(_key_data(leaf)) for leaf in leaves]
        return [
            array.astype(jax.dtypes.canonicalize_dtype(array.dtype), copy=False) for array in arrays
        ]

    def argument_leaves(self, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
        """The entry's arguments for a device-resident run: arrays that may be on a device
        (a ``jax.Array``, a heron DeviceArray, anything with ``__dlpack__``) as they are,
        the rest as :meth:`flatten_arguments` makes them (numpy, in jax's dtypes)."""
        import jax

        leaves, tree = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)))
        if tree != self.in_tree:
            raise TypeError(
                f"heron.jax: arguments of structure {tree} given to '{self.name}',"
                f" lowered for {self.in_tree}"
            )
        return [_entry_argument(leaf, jax.Array) for leaf in leaves]

    def donated_leaves(
        self,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        donate_argnums: int | Sequence[int],
        donate_argnames: str | Sequence[str],
        static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (),
    ) -> frozenset[int]:
        """The entry parameters (argument leaves) of the arguments donated by position
        (``donate_argnums``, counted among all positional arguments, as jax counts them)
        or by name; static arguments, by position or name, are no parameters."""
        import jax

        numbers = _positions(donate_argnums, len(args))
        static = _positions(static_argnums, len(args))
        static_names = set(_as_tuple(static_argnames))
        names = set(_as_tuple(donate_argnames))
        donated: set[int] = set()
        position = 0
        for number, arg in enumerate(args):
            if number in static:
                continue
            count = len(jax.tree_util.tree_leaves(arg))
            if number in numbers:
                donated.update(range(position, position + count))
            position += count
        for name, value in sorted(kwargs.items()):  # jax flattens a dict by sorted keys
            if name in static_names:
                continue
            count = len(jax.tree_util.tree_leaves(value))
            if name in names:
                donated.update(range(position, position + count))
            position += count
        return frozenset(donated)

    def unflatten_results(self, leaves: Sequence[np.ndarray]) -> Any:
        """The function's result, in its own pytree structure, from the entry's leaves (a
        typed PRNG key's data made a key again)."""
        import jax

        leaves = list(leaves)
        for number, impl in enumerate(self.result_keys):
            if impl is not None:
                data = leaves[number]
                data = data if isinstance(data, jax.Array) else np.asarray(data)
                leaves[number] = jax.random.wrap_key_data(data, impl=impl)
        return jax.tree_util.tree_unflatten(self.out_tree, leaves)


def _is_key(dtype: Any) -> bool:
    return dtype is not None and _is_key_dtype(dtype)


@functools.cache
def _is_key_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is a typed PRNG key's (asked of every leaf of every call: once
    per dtype)."""
    import jax

    return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))


def _entry_argument(leaf: Any, array_type: type) -> Any:
    """One leaf as :meth:`Lowered.argument_leaves` hands it on (``array_type``: jax.Array):
    a jax array as it is (a typed key's data), another array that may live on a device
    as it is, anything else as a numpy array in jax's dtype."""
    if isinstance(leaf, array_type):
        return _key_data(leaf)
    return leaf if _on_a_device(leaf) else _host_leaf(leaf)


def _key_data(leaf: Any) -> Any:
    """A typed PRNG key array (``jax.random.key``) as the entry takes it: its data (jax
    lowers a key of threefry as ``u32[..., 2]``); any other leaf as it is."""
    import jax

    if isinstance(leaf, jax.Array) and _is_key(leaf.dtype):
        return jax.random.key_data(leaf)
    return leaf


def _result_key(aval: Any) -> Any:
    """The PRNG implementation of a result that is a typed key (None otherwise): what
    ``jax.random.wrap_key_data`` takes to make the entry's data a key again."""
    dtype = getattr(aval, "dtype", None)
    if not _is_key(dtype):
        return None
    return dtype._impl  # jax's key dtype carries its implementation; no public accessor


def _on_a_device(leaf: Any) -> bool:
    """Whether ``leaf`` may live on a device (then the runner decides how to take it)."""
    import jax

    return isinstance(leaf, jax.Array) or (
        hasattr(leaf, "__dlpack__") and not isinstance(leaf, (np.ndarray, np.generic))
    )


def _host_leaf(leaf: Any) -> np.ndarray:
    import jax

    array = np.asarray(leaf)
    return array.astype(jax.dtypes.canonicalize_dtype(array.dtype), copy=False)


def _name(function: Callable[..., Any]) -> str:
    return getattr(function, "__name__", None) or type(function).__name__


#: heron backend -> the platform jax lowers for: a GPU's own HLO (what jax gives XLA:GPU,
#: cuSOLVER and cuFFT custom calls included) where the program runs on that GPU, the CPU's
#: (LAPACK custom calls, which heron.jax runs on the host) on the interpreter.
PLATFORMS = {"cuda": "cuda", "rocm": "rocm"}


def platform_for(backend: str | None) -> str:
    """The platform jax lowers for when the program runs on ``backend``."""
    return PLATFORMS.get(backend or "", "cpu")


def lower(
    function: Callable[..., Any],
    *args: Any,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    donate_argnums: int | Sequence[int] = (),
    donate_argnames: str | Sequence[str] = (),
    platform: str = "cpu",
    **kwargs: Any,
) -> Lowered:
    """``function`` lowered by jax for ``platform`` (``cpu``, ``cuda`` or ``rocm``: no device
    of it is needed) at these arguments (see the module docstring).

    Arguments are anything jax takes (arrays, scalars, typed PRNG keys, pytrees of them,
    or ``jax.ShapeDtypeStruct`` to lower without data). Every argument becomes an
    entry parameter, used or not (``keep_unused``), so that parameters and
    leaves correspond one to one. Donated arguments (``donate_argnums``,
    ``donate_argnames``, as jax's) give the module an ``input_output_alias``
    where a result can take a donated argument's buffer.
    """
    import jax

    jitted = jax.jit(
        function,
        keep_unused=True,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        donate_argnames=donate_argnames,
    )
    abstract_args, abstract_kwargs = jax.tree_util.tree_map(_abstract, (args, kwargs))
    try:
        traced = jitted.trace(*abstract_args, **abstract_kwargs)
        lowered = traced.lower(lowering_platforms=(platform,))
        jaxpr = traced.jaxpr
    except TypeError as error:  # an argument's class jax cannot describe: over its leaves
        flat, leaves, donated = _over_leaves(
            function,
            args,
            kwargs,
            (static_argnums, static_argnames),
            (donate_argnums, donate_argnames),
        )
        over_leaves = jax.jit(flat, keep_unused=True, donate_argnums=donated)
        try:
            traced = over_leaves.trace(*[_abstract(leaf) for leaf in leaves])
            lowered = traced.lower(lowering_platforms=(platform,))
        except Exception:
            raise error from None
        jaxpr = None
    dynamic_args, dynamic_kwargs = _dynamic(args, kwargs, static_argnums, static_argnames)
    in_tree = jax.tree_util.tree_structure((tuple(dynamic_args), dict(dynamic_kwargs)))
    if len(traced.jaxpr.in_avals) > in_tree.num_leaves:
        # jax made values the function closes over parameters: another transformation's
        # tracers (the function is called inside jax.grad, jax.vmap, ...), which no run takes
        raise TracedCall
    # Every constant in full: by default the text elides an array of more than a few
    # elements as {...} (a function closing over a table of sines could not compile).
    text = lowered.compiler_ir("hlo").as_hlo_text(print_large_constants=True)
    name = _name(function)
    module = parse_module(text, source=f"<jax: {name}>")
    # jax's own record of the callbacks' functions (private: absent, a callback is refused
    # when it runs, naming it).
    compile_args = getattr(getattr(lowered, "_lowering", None), "compile_args", None) or {}
    callbacks = tuple(compile_args.get("host_callbacks", ()))
    result_keys = tuple(_result_key(aval) for aval in jax.tree_util.tree_leaves(lowered.out_info))
    if not any(impl is not None for impl in result_keys):
        result_keys = ()
    return Lowered(name, text, module, in_tree, lowered.out_tree, callbacks, result_keys, jaxpr)


def _over_leaves(
    function: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    static: tuple[Any, Any],
    donate: tuple[Any, Any],
) -> tuple[Callable[..., Any], list[Any], tuple[int, ...]]:
    """``function`` as a function of its dynamic arguments' leaves (the static ones
    closed over), those leaves, and the positions of the donated arguments' leaves:
    what :func:`lower` lowers where jax cannot lower ``function`` itself.

    jax lowers the same program either way (its parameters are these leaves in this
    order; only their names, taken from the function's parameters, are lost), but
    lowering a pytree argument rebuilds the argument's class around placeholder
    leaves to describe it, and a class whose constructor computes with its leaves
    fails there: ``jmp.DynamicLossScale`` runs ``jax.eval_shape`` on
    them, so ``jax.jit(f).lower(loss_scale, x)`` raises where ``jax.jit(f)(loss_scale,
    x)`` runs (a helper's sweep of mixed-precision training steps). Over leaves the
    class is rebuilt only inside the trace, from tracers, as a call of ``jax.jit``
    rebuilds it."""
    import jax

    static_numbers = _positions(static[0], len(args))
    static_names = set(_as_tuple(static[1]))
    dynamic_numbers = [i for i in range(len(args)) if i not in static_numbers]
    dynamic_names = [name for name in kwargs if name not in static_names]
    donated_numbers = _positions(donate[0], len(args))
    donated_names = set(_as_tuple(donate[1]))
    leaves: list[Any] = []
    donated: list[int] = []
    for key, value in [
        *((i, args[i]) for i in dynamic_numbers),
        *sorted(((name, kwargs[name]) for name in dynamic_names), key=lambda item: item[0]),
    ]:
        own = jax.tree_util.tree_leaves(value)
        if key in donated_numbers or key in donated_names:
            donated.extend(range(len(leaves), len(leaves) + len(own)))
        leaves.extend(own)
    structure = jax.tree_util.tree_structure(
        (tuple(args[i] for i in dynamic_numbers), {name: kwargs[name] for name in dynamic_names})
    )

    def over_leaves(*values: Any) -> Any:
        dynamic_args, dynamic_kwargs = jax.tree_util.tree_unflatten(structure, values)
        full_args = list(args)
        for number, value in zip(dynamic_numbers, dynamic_args, strict=True):
            full_args[number] = value
        return function(*full_args, **{**kwargs, **dynamic_kwargs})

    over_leaves.__name__ = getattr(function, "__name__", "function")
    over_leaves.__qualname__ = getattr(function, "__qualname__", over_leaves.__name__)
    return over_leaves, leaves, tuple(donated)


def resolve_argnums_and_argnames(
    function: Callable[..., Any],
    argnums: int | Sequence[int],
    argnames: str | Sequence[str],
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Both ways of naming ``function``'s static (or donated) arguments, each completed
    from the other as ``jax.jit`` completes them: given positions, the names of those
    parameters that may be passed by keyword; given names, the positions of those that
    may be passed by position; given both (or a function without a signature), as
    given. So an argument is found however a call passes it."""
    import inspect

    numbers, names = tuple(_as_tuple(argnums)), tuple(_as_tuple(argnames))
    if (numbers and names) or not (numbers or names):
        return numbers, names
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return numbers, names
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if numbers:
        names = tuple(
            positional[n].name
            for n in numbers
            if -len(positional) <= n < len(positional)
            and positional[n].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
    else:
        where = {p.name: k for k, p in enumerate(positional)}
        numbers = tuple(where[name] for name in names if name in where)
    return numbers, names


def _positions(argnums: int | Sequence[int], count: int) -> set[int]:
    """The positions among a call's ``count`` positional arguments that ``argnums``
    names (a negative one counts from the end; one past the end names none: that
    argument came by keyword or not at all)."""
    return {n + count if n < 0 else n for n in _as_tuple(argnums)} & set(range(count))


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if isinstance(value, (int, str)):
        return (value,)
    return tuple(value)


def static_positions(
    count: int,
    kwargs: dict[str, Any],
    static_argnums: int | Sequence[int],
    static_argnames: str | Sequence[str],
) -> tuple[set[int], list[str]]:
    """Which of a call's ``count`` positional arguments, and which of its keywords, are
    static (jax's rule: :func:`split_static`)."""
    return _positions(static_argnums, count), sorted(set(_as_tuple(static_argnames)) & set(kwargs))


def _dynamic(
    args: Sequence[Any],
    kwargs: dict[str, Any],
    static_argnums: int | Sequence[int],
    static_argnames: str | Sequence[str],
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments that become entry parameters (the static ones removed)."""
    numbers = _positions(static_argnums, len(args))
    names = set(_as_tuple(static_argnames))
    return (
        [a for i, a in enumerate(args) if i not in numbers],
        {k: v for k, v in kwargs.items() if k not in names},
    )


def split_static(
    args: Sequence[Any],
    kwargs: dict[str, Any],
    static_argnums: int | Sequence[int],
    static_argnames: str | Sequence[str],
) -> tuple[list[Any], dict[str, Any], tuple[Any, ...]]:
    """``(dynamic args, dynamic kwargs, static values)`` of one call."""
    dynamic_args, dynamic_kwargs = _dynamic(args, kwargs, static_argnums, static_argnames)
    numbers, names = static_positions(len(args), kwargs, static_argnums, static_argnames)
    static = tuple(args[n] for n in sorted(numbers)) + tuple((name, kwargs[name]) for name in names)
    return dynamic_args, dynamic_kwargs, static
