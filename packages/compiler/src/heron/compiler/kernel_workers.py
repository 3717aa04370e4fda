"""A program's kernels taken through heron's passes and the backends' stages on worker processes.

heron's MLIR passes run in Python, and a program's compile used one core for
them while the second waited for LLVM and ptxas: on the 2-core machine of
docs/benchmarks.md two compiles side by side each ran at 0.85 of their speed
alone. XLA compiles a module's kernels on a thread pool; the interpreter lock
rules that out for heron's passes, so :class:`KernelWorkers` runs them in
processes of their own. The compile's thread still emits each fusion (the
launch and the arguments thunk emission needs right away) and hands the
emitted module, as MLIR text, to the least busy worker, which runs heron's
passes and each backend's stages up to a batched last one (CUDA's ptxas, which
the compile still runs once for a group of kernels). The images are those of
an in-process compile, byte for byte.

Workers are started when a compile first asks for them (``HERON_COMPILE_WORKERS=N``,
or :func:`shared_workers` called with a count), as ``python -m
heron.compiler.kernel_worker`` processes reading requests on their standard
input: no ``multiprocessing`` start method, so a user's main module is never
imported again. They stay for the life of the process (the start costs a
second or two of CPU, paid back by compiles of programs with many kernels,
not by one small compile) and end with it. A worker that dies fails the
kernels it held, naming its exit status; the next compiles run in process.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import pickle
import struct
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import IO, Any

import attrs

from heron.hlo.errors import UnsupportedError
from heron.runtime.core.device import KernelImage
from heron.target import Target

__all__ = [
    "WORKERS_ENV",
    "KernelRequest",
    "KernelWorkers",
    "WorkerStages",
    "WorkersEnded",
    "configured_workers",
    "read_message",
    "shared_workers",
    "write_message",
]

#: How many worker processes a compile uses (0 or unset: none, everything in process).
WORKERS_ENV = "HERON_COMPILE_WORKERS"

_HEADER = struct.Struct("<Q")


def configured_workers() -> int:
    """The worker count ``HERON_COMPILE_WORKERS`` asks for (0 when unset)."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if not text:
        return 0
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise UnsupportedError(
            f"{WORKERS_ENV}={text!r}: expected a number of worker processes (0: none)"
        )
    return count


class WorkersEnded(UnsupportedError):
    """No worker can take a kernel any more (one ended): compile it in process."""


@attrs.frozen
class WorkerStages:
    """What a worker made of one kernel for one backend: every stage but a batched last
    one run (``batched_left``), the records of heron's passes and of those stages."""

    image: KernelImage | None
    #: The last stage's output: the batched stage's input when it was left.
    value: Any
    last_ran: str
    artefacts: tuple[Any, ...]
    records: tuple[Any, ...]
    batched_left: bool


@attrs.frozen
class KernelRequest:
    """One emitted kernel for a worker: its MLIR text, names, Target and backends, and
    the number its answer comes back under."""

    number: int
    text: str
    kernel_name: str
    fusion_name: str
    target: Target
    backends: tuple[str, ...]


class _Worker:
    """One worker process and the requests it holds."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "heron.compiler.kernel_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.pending: dict[int, Future[dict[str, WorkerStages]]] = {}
        self.lock = threading.Lock()  #: guards ``pending`` and ``alive``
        self.write_lock = threading.Lock()  #: one request written at a time
        self.alive = True
        threading.Thread(target=self._read, name="heron-kernel-worker", daemon=True).start()

    def send(self, request: KernelRequest, future: Future[dict[str, WorkerStages]]) -> None:
        with self.lock:
            if not self.alive:
                raise WorkersEnded("a kernel worker ended")
            self.pending[request.number] = future
        stdin = self.process.stdin
        assert stdin is not None
        try:
            # Not under ``lock``: a write waits while the worker finishes what it holds, and
            # the reader takes ``lock`` to hand over what it answered meanwhile.
            with self.write_lock:
                write_message(stdin, request)
        except OSError:  # it has ended
            with self.lock:
                self.alive = False
                self.pending.pop(request.number, None)
            raise WorkersEnded("a kernel worker ended") from None

    def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        reason = None
        try:
            while (message := read_message(stdout)) is not None:
                number, ok, payload = message
                with self.lock:
                    future = self.pending.pop(number, None)
                if future is None:
                    continue
                if ok:
                    future.set_result(payload)
                else:
                    future.set_exception(payload)
        except Exception as exc:  # noqa: BLE001 - an answer that cannot be read ends the worker
            reason = f"its answer could not be read ({type(exc).__name__}: {exc})"
            self.process.kill()
        status = self.process.wait()
        with self.lock:
            self.alive = False
            pending, self.pending = list(self.pending.values()), {}
        for future in pending:
            future.set_exception(
                UnsupportedError(
                    f"a kernel worker ended while compiling: {reason or f'exit status {status}'}"
                )
            )

    def end(self) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):  # already gone: nothing to end
                stdin.close()  # a worker ends at the end of its input
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


class KernelWorkers:
    """Worker processes that take emitted kernels through heron's passes and the
    backends' stages (see the module's doc); used from any thread."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"KernelWorkers: at least one worker, not {count}")
        self._workers = [_Worker() for _ in range(count)]
        self._numbers = itertools.count()

    @property
    def alive(self) -> bool:
        return all(worker.alive for worker in self._workers)

    def submit(
        self,
        text: str,
        kernel_name: str,
        fusion_name: str,
        target: Target,
        backends: tuple[str, ...],
    ) -> Future[dict[str, WorkerStages]]:
        """The kernel (its emitted MLIR ``text``) through heron's passes and each of
        ``backends``' stages but a batched last one, on the least busy worker."""
        worker = min(self._workers, key=lambda w: (not w.alive, len(w.pending)))
        future: Future[dict[str, WorkerStages]] = Future()
        request = KernelRequest(
            next(self._numbers), text, kernel_name, fusion_name, target, backends
        )
        worker.send(request, future)
        return future

    def end(self) -> None:
        """End the workers (each finishes what it holds first)."""
        for worker in self._workers:
            worker.end()


_shared: KernelWorkers | None = None
_shared_lock = threading.Lock()


def shared_workers(count: int | None = None) -> KernelWorkers | None:
    """The process's workers (``count``, default :func:`configured_workers`), started on
    the first call that asks for some; None when none are asked for or they broke."""
    global _shared
    wanted = configured_workers() if count is None else count
    if wanted <= 0:
        return None
    with _shared_lock:
        if _shared is not None and not _shared.alive:
            return None
        if _shared is None:
            _shared = KernelWorkers(wanted)
            atexit.register(_shared.end)
        return _shared


def read_message(stream: IO[bytes]) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def write_message(stream: IO[bytes], message: object) -> None:
    """``message`` pickled, after its length: what :func:`read_message` reads."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()
