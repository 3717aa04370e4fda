"""Creating MLIR contexts that know the ``heron_gpu`` dialect.

Emitters, tests and the pass pipeline all need the same set of dialects. The
IRDL dialect must be loaded exactly once per context: a second
``irdl.load_dialects`` for the same names aborts the process inside MLIR, so
:func:`ensure_dialect_loaded` checks the registry first.
"""

from __future__ import annotations

import sys
import threading
import types

from mlir import ir
from mlir.dialects import irdl

from heron.emitters import callbacks
from heron.emitters.dialect.irdl_source import DIALECT_NAME, IRDL_TEXT

# The upstream dialects the emitters and the lowering pipeline use.
UPSTREAM_DIALECTS = (
    "builtin",
    "func",
    "arith",
    "math",
    "scf",
    "tensor",
    "vector",
    "gpu",
    "llvm",
    "nvvm",
    "rocdl",
    "complex",
)


def _register_python_module() -> None:
    """Tell the bindings that ``heron_gpu`` has no Python op classes.

    When Python code receives an op, the bindings look for
    ``mlir.dialects.<dialect>`` to find an OpView class; for an IRDL dialect
    that import fails every time (about 70 µs per op, in every pass). An
    empty module registered once ends the search.
    """
    name = f"mlir.dialects.{DIALECT_NAME}"
    if name not in sys.modules:
        sys.modules[name] = types.ModuleType(name, "heron_gpu has no Python op classes (IRDL).")


def ensure_dialect_loaded(context: ir.Context) -> None:
    """Load the ``heron_gpu`` IRDL dialect into ``context`` unless it is there already."""
    _register_python_module()
    if context.is_registered_operation(f"{DIALECT_NAME}.loop"):
        return
    with context, ir.Location.unknown(context):
        definition = ir.Module.parse(IRDL_TEXT)
        irdl.load_dialects(definition)


#: How many times :func:`make_context` hands out one context before it makes a new one.
#: A context keeps every type and attribute it ever uniqued (a kernel's constants among
#: them) for as long as it lives: sharing one among a program's kernels saves its
#: creation (some 15 ms, as much as emitting a small kernel), a bound keeps a long
#: process (heron.jax compiling function after function) from growing without end.
CONTEXT_REUSES = 64

_local = threading.local()


def make_context() -> ir.Context:
    """A context with the upstream dialects loaded and ``heron_gpu`` registered: one of
    this thread's, shared by up to :data:`CONTEXT_REUSES` callers (modules of one
    context are independent; nothing heron does changes a context's settings).

    Loading the upstream dialects eagerly (rather than on first parse) makes
    builders that create ops directly work without a parse step first.
    """
    uses = getattr(_local, "uses", CONTEXT_REUSES)
    if uses < CONTEXT_REUSES:
        _local.uses = uses + 1
        return _local.context
    context = fresh_context()
    _local.context, _local.uses = context, 1
    return context


def fresh_context() -> ir.Context:
    """A new context with the upstream dialects loaded and ``heron_gpu`` registered."""
    callbacks.install_attribute_casters()  # no attribute cast may abort the process
    context = ir.Context()
    for name in UPSTREAM_DIALECTS:
        context.dialects[name]  # noqa: B018 - indexing loads the dialect
    ensure_dialect_loaded(context)
    return context
