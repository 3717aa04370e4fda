"""The threads a compile runs its kernels' backend stages on (LLVM, ptxas): one pool a process.

:func:`heron.compiler.executable.compile_program` hands each kernel's stages from
the first concurrent one on (CUDA's ``ptx`` and ``cubin``) to worker threads
while it emits the next kernels. It used to start a thread pool of its own for
every compile; a fresh thread starts with a cold malloc arena and nothing of the
libraries' per-thread state, and nvJitLink's ptxas ran 1.3 ms slower on one
(layernorm's one kernel: 11.0 ms against 9.7 ms on a thread that had compiled
before; 8.9 against 6.9 ms in a loop of nothing else), besides the start and
join of the threads themselves. XLA keeps one compile thread pool for the
process likewise.

Each compile sees the pool through a :class:`CompileThreads`, which remembers
what that compile submitted: a compile that fails cancels its own work not yet
started and waits for what is running (what shutting a pool of its own down
did), and leaves other compiles' work alone.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from typing import Any, ParamSpec, TypeVar

__all__ = ["CompileThreads", "shared_threads"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def shared_threads() -> ThreadPoolExecutor:
    """The process's stage threads (one per CPU, started as work needs them)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="heron-stages")
        return _pool


def _forget_pool() -> None:
    """In a forked child the pool's threads do not exist: its first compile starts a pool."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


class CompileThreads(Executor):
    """One compile's view of the shared pool: it submits there, and :meth:`shutdown`
    cancels and waits for this compile's work only (never the pool's threads)."""

    def __init__(self, pool: Executor | None = None) -> None:
        self._pool = pool if pool is not None else shared_threads()
        self._submitted: list[Future[Any]] = []
        self._lock = threading.Lock()

    def submit(  # type: ignore[override]
        self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> Future[_T]:
        """Run ``fn`` on a stage thread (called from the compile's thread and from stage
        callbacks on the workers: a batch queued when its kernels' LLVM is done)."""
        future = self._pool.submit(fn, *args, **kwargs)
        with self._lock:
            self._submitted.append(future)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Cancel this compile's work not started (``cancel_futures``), then wait for the
        rest of it (``wait``), work its running stages queue meanwhile included; the
        pool's threads stay for the next compile."""
        seen = -1
        while True:
            with self._lock:
                submitted = list(self._submitted)
            if len(submitted) == seen:
                return
            seen = len(submitted)
            if cancel_futures:
                for future in submitted:
                    future.cancel()
            if not wait:
                return
            wait_all(submitted)
