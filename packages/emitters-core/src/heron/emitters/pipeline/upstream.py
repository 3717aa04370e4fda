"""Upstream MLIR pass pipelines, each parsed once per context and thread, then reused.

heron's passes and the backends' lowering run upstream pipelines
(``builtin.module(canonicalize,cse)``, the NVVM conversion ...) on every
kernel. Parsing a pipeline string and initialising its passes (a
canonicalizer gathers the patterns of every loaded dialect) cost more than
running them on a small kernel: made once and reused, the program corpus's
upstream MLIR time fell by about 30% (0.36 -> 0.26 s over its 85 programs).

A pass manager belongs to its context. Kernels share a context
(:func:`heron.emitters.dialect.context.make_context` hands one out to up to 64
of them, then makes a new one), so a thread keeps the pass managers of the
context it last used only; a run on another context parses afresh.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["upstream_pass_manager"]

_local = threading.local()


def upstream_pass_manager(pipeline: str, context: Any) -> Any:
    """The ``mlir.passmanager.PassManager`` of ``pipeline`` (a ``builtin.module(...)``
    string) in ``context``, parsed the first time this thread asks for it there."""
    from mlir import passmanager

    kept = getattr(_local, "kept", None)
    if kept is None or kept[0] is not context:
        kept = _local.kept = (context, {})
    managers: dict[str, Any] = kept[1]
    manager = managers.get(pipeline)
    if manager is None:
        manager = passmanager.PassManager.parse(pipeline, context=context)
        # Not verified after each of its passes: heron's pass loop verifies the module
        # after the pass that ran the pipeline (or once after the last), and the lowering
        # verifies before translating; MLIR's verifier after every upstream pass was a
        # tenth of their time (XLA's GPU compiler verifies so in debug builds only).
        manager.enable_verifier(False)
        managers[pipeline] = manager
    return manager
