"""The boundary between MLIR and the Python callbacks it calls: no exception crosses it.

MLIR calls back into Python from C++: walk visitors (``Operation.walk``),
rewrite patterns (``RewritePatternSet.add``), Python passes
(``PassManager.add``) and the bindings' own attribute and type casters
(``register_type_caster``), which run whenever an attribute is handed to
Python. An exception that leaves such a callback is, depending on the entry
point, turned into a bare ``RuntimeError`` that has lost its type (walks),
left to a C++ frame that cannot propagate it (``std::terminate``: SIGABRT, the
whole process gone, as reading a ``dense<...> : tensor<2xcomplex<f32>>``
attribute through ``NamedAttribute.attr`` did), or leaves the IR half
rewritten with no word of which pattern did it.

Every callback heron hands to MLIR therefore goes through a
:class:`CallbackGuard`:

- the guard wraps the callback (:meth:`CallbackGuard.visitor`,
  :meth:`CallbackGuard.pattern`, :meth:`CallbackGuard.pass_`); the wrapper
  catches any exception, stores the first one with the callback's name and
  the op it was looking at, and makes the callback fail the way MLIR
  understands (a walk is interrupted, a pattern does not match, a pass signals
  failure); once a callback has failed, later calls fail at once;
- when control is back in Python (leaving ``with guard:`` or
  :meth:`CallbackGuard.check`) the stored exception is raised as
  :class:`CallbackError`, heron's ``UnsupportedError``, naming the callback
  and the op, with the original as ``__cause__``; it replaces whatever MLIR
  raised meanwhile (``MLIRError: Failure while executing pass pipeline``).

The registration helpers :func:`walk`, :func:`add_pattern`, :func:`add_pass`
and :func:`apply_patterns` are the only way heron's code registers a callback.
:func:`install_attribute_casters` replaces the bindings' caster for dense
elements attributes, which raises for complex elements, by one that never
raises (complex attributes come back as plain ``DenseElementsAttr``); it runs
when this module is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlir import ir

from heron.hlo.errors import HloError, UnsupportedError

Visitor = Callable[[ir.Operation], Any]
PatternFn = Callable[[Any, Any], Any]
PassFn = Callable[[ir.Operation, Any], None]


class CallbackError(UnsupportedError):
    """An exception raised in a Python callback that MLIR called, re-raised back in Python.

    ``callback`` is ``"<kind> '<name>'"`` (``walk 'inline'``, ``pattern
    'fold-add'``, ``pass 'my-pass'``), ``op`` describes the op it was called
    on, ``original`` is the exception (also the ``__cause__``).
    """

    def __init__(self, callback: str, op: str, original: BaseException) -> None:
        detail = str(original.message) if isinstance(original, HloError) else str(original)
        kind = "" if isinstance(original, HloError) else f"{type(original).__name__}: "
        super().__init__(
            f"{callback} failed on {op}: {kind}{detail}",
            original.location if isinstance(original, HloError) else None,
        )
        self.callback = callback
        self.op = op
        self.original = original


def describe_op(op: Any) -> str:
    """``'arith.constant' at loc(...)``; never raises (it runs in the failure path)."""
    try:
        operation = op.operation if hasattr(op, "operation") else op
        name = operation.name
    except Exception:  # noqa: BLE001 - the failure path must not fail
        return "an op"
    try:
        location = str(operation.location)
    except Exception:  # noqa: BLE001
        location = ""
    if not location or location == "loc(unknown)":
        return f"op '{name}'"
    return f"op '{name}' at {location}"


class CallbackGuard:
    """Catches what the callbacks it wraps raise; re-raises it once MLIR has returned.

    One guard covers one call into MLIR (a walk, a greedy rewrite, a pass
    pipeline run) and every callback that call may make. Use it as a context
    manager around that call, or call :meth:`check` after it.
    """

    def __init__(self) -> None:
        self._failure: tuple[str, str, BaseException] | None = None

    @property
    def failed(self) -> bool:
        """Whether a wrapped callback has raised."""
        return self._failure is not None

    def record(self, callback: str, op: Any, exc: BaseException) -> None:
        """Store ``exc`` (only the first failure is kept: it is the cause of the rest)."""
        if self._failure is None:
            self._failure = (callback, describe_op(op), exc)

    def check(self) -> None:
        """Raise the stored failure, if any, as :class:`CallbackError`."""
        if self._failure is None:
            return
        callback, op, exc = self._failure
        self._failure = None
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: as they were
            raise exc
        raise CallbackError(callback, op, exc) from exc

    def __enter__(self) -> CallbackGuard:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        # A stored failure explains whatever MLIR raised after it: report it instead.
        self.check()

    # -- wrappers, one per kind of callback ---------------------------------------------------
    def visitor(self, fn: Visitor, name: str) -> Callable[[ir.Operation], ir.WalkResult]:
        """A walk visitor: on an exception the walk is interrupted."""
        label = f"walk {name!r}"

        def guarded(op: ir.Operation) -> ir.WalkResult:
            if self._failure is not None:
                return ir.WalkResult.INTERRUPT
            try:
                return fn(op)
            except BaseException as exc:  # noqa: BLE001 - nothing may reach the C++ caller
                self.record(label, op, exc)
                return ir.WalkResult.INTERRUPT

        return guarded

    def pattern(self, fn: PatternFn, name: str) -> PatternFn:
        """A rewrite pattern ``fn(op, rewriter)``: on an exception it does not match."""
        label = f"pattern {name!r}"

        def guarded(op: Any, rewriter: Any) -> Any:
            if self._failure is not None:
                return True  # a failed match
            try:
                return fn(op, rewriter)
            except BaseException as exc:  # noqa: BLE001
                self.record(label, op, exc)
                return True

        return guarded

    def pass_(self, fn: PassFn, name: str) -> PassFn:
        """A Python pass ``fn(op, pass_)``: on an exception the pass signals failure."""
        label = f"pass {name!r}"

        def guarded(op: ir.Operation, pass_: Any) -> None:
            if self._failure is None:
                try:
                    fn(op, pass_)
                    return
                except BaseException as exc:  # noqa: BLE001
                    self.record(label, op, exc)
            try:
                pass_.signal_pass_failure()
            except BaseException as exc:  # noqa: BLE001
                self.record(label, op, exc)

        return guarded


# -- registration helpers: the only way heron hands a callback to MLIR -----------------------
def walk(
    root: ir.Operation | ir.OpView,
    visit: Visitor,
    order: ir.WalkOrder = ir.WalkOrder.POST_ORDER,
    *,
    name: str,
) -> None:
    """``root.walk(visit, order)`` with ``visit`` guarded; its exception re-raised after."""
    guard = CallbackGuard()
    with guard:
        root.operation.walk(guard.visitor(visit, name), order)


def collect_ops(
    root: ir.Operation | ir.OpView,
    name: str | frozenset[str] | None = None,
    *,
    label: str,
) -> list[ir.Operation]:
    """Every op nested in ``root`` (``root`` included), pre-order, optionally of one name
    or of a set of names (a rewrite that looks for a few kinds of op among hundreds
    tests each op's name here, without a frame of its own per op).

    A walk with its guard written into the visitor, one Python frame an op instead of
    two: the passes walk every kernel some forty times, and a walk's cost is its
    visitor's calls (about 0.7 us an op). The guarantee is :func:`walk`'s: what the
    visitor raises (a KeyboardInterrupt arriving in it) stops the walk and is re-raised
    once MLIR has returned, as :class:`CallbackError` naming ``label`` and the op.
    """
    found: list[ir.Operation] = []
    failure: list[tuple[ir.Operation, BaseException]] = []
    append = found.append
    advance, interrupt = ir.WalkResult.ADVANCE, ir.WalkResult.INTERRUPT
    if name is None:

        def visit(op: ir.Operation) -> ir.WalkResult:
            try:
                append(op)
            except BaseException as exc:  # noqa: BLE001 - nothing may reach the C++ caller
                failure.append((op, exc))
                return interrupt
            return advance

    elif isinstance(name, frozenset):
        names = name

        def visit(op: ir.Operation) -> ir.WalkResult:
            try:
                if op.name in names:
                    append(op)
            except BaseException as exc:  # noqa: BLE001
                failure.append((op, exc))
                return interrupt
            return advance

    else:

        def visit(op: ir.Operation) -> ir.WalkResult:
            try:
                if op.name == name:
                    append(op)
            except BaseException as exc:  # noqa: BLE001
                failure.append((op, exc))
                return interrupt
            return advance

    root.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    if failure:
        guard = CallbackGuard()
        guard.record(f"walk {label!r}", *failure[0])
        guard.check()
    return found


def add_pattern(
    patterns: Any,
    root: type | str,
    fn: PatternFn,
    guard: CallbackGuard,
    *,
    name: str | None = None,
    benefit: int = 1,
) -> None:
    """``patterns.add(root, fn, benefit)`` with ``fn`` guarded by ``guard``.

    Run the patterns inside ``with guard:`` (or with :func:`apply_patterns`).
    """
    label = name or getattr(fn, "__name__", str(root))
    patterns.add(root, guard.pattern(fn, label), benefit=benefit)


def add_pass(
    manager: Any,
    fn: PassFn,
    guard: CallbackGuard,
    *,
    name: str | None = None,
    **options: Any,
) -> None:
    """``manager.add(fn, name, ...)`` with ``fn`` guarded by ``guard``.

    Run the pass manager inside ``with guard:``.
    """
    label = name or getattr(fn, "__name__", "python-pass")
    manager.add(guard.pass_(fn, label), label, **options)


def apply_patterns(
    root: ir.Operation | ir.OpView | ir.Module,
    patterns: Any,
    guard: CallbackGuard,
    config: Any = None,
) -> None:
    """Apply ``patterns`` (a ``RewritePatternSet`` or a frozen one) greedily, guarded."""
    from mlir import rewrite

    frozen = patterns.freeze() if isinstance(patterns, rewrite.RewritePatternSet) else patterns
    with guard:
        target = root.operation if isinstance(root, ir.Module) else root
        rewrite.apply_patterns_and_fold_greedily(target, frozen, config)


# -- the bindings' casters -------------------------------------------------------------------
_casters_installed = False


def _dense_elements_caster(attr: ir.Attribute) -> ir.Attribute:
    """The subclass for a dense int-or-float elements attribute; never raises.

    The bindings' own caster raises ``TypeError`` for complex elements from a
    frame that cannot propagate it (``NamedAttribute.attr`` aborts the
    process); a complex attribute is returned as ``DenseElementsAttr``.
    """
    try:
        element = ir.ShapedType(attr.type).element_type
        if isinstance(element, ir.FloatType):
            return ir.DenseFPElementsAttr(attr)
        if isinstance(element, (ir.IntegerType, ir.IndexType)):
            return ir.DenseIntElementsAttr(attr)
        return ir.DenseElementsAttr(attr)
    except BaseException:  # noqa: BLE001 - a caster must not raise
        return attr


def install_attribute_casters() -> None:
    """Replace the bindings' dense-elements caster by :func:`_dense_elements_caster` (once)."""
    global _casters_installed
    if _casters_installed:
        return
    with ir.Context():
        probe = ir.DenseFPElementsAttr(ir.Attribute.parse("dense<0.0> : tensor<1xf32>"))
        type_id = probe.typeid
    ir.register_type_caster(type_id, replace=True)(_dense_elements_caster)
    _casters_installed = True


install_attribute_casters()
