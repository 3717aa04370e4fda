"""Finding and running the CUDA tools that come from the ``nvidia-cuda-nvcc`` wheel
(and nvdisasm, from ``nvidia-cuda-nvdisasm``).

``ptxas`` (PTX -> cubin, and the only real judge of whether PTX is valid)
and ``libdevice.10.bc`` (the math library the NVVM lowering calls into) both
ship in that wheel, under ``site-packages/nvidia/cu13/`` (``nvidia/cuda_nvcc/``
in the CUDA 12 wheels). Neither needs a GPU. ``HERON_PTXAS`` and
``HERON_LIBDEVICE`` override the search, for machines with a system CUDA.

PTX is assembled in this process by nvJitLink (the same ptxas, as a library:
:mod:`heron.runtime.cuda.nvjitlink_assembler`) where it loads and no
``HERON_PTXAS`` names an executable; otherwise by the ptxas executable.
:func:`cubin_assembler` says which.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from heron.runtime.cuda import nvjitlink_assembler
from heron.runtime.cuda.compiler_mlir import COMPILE_EXTRA

# Where the NVIDIA wheels put the toolkit, relative to the ``nvidia`` namespace package.
_TOOLKIT_DIRS = ("cu13", "cu12", "cuda_nvcc")


class ToolNotFoundError(FileNotFoundError):
    """ptxas, nvdisasm or libdevice is not installed where heron looks for it."""


class PtxasError(RuntimeError):
    """ptxas rejected the PTX; the message quotes ptxas."""

    def __init__(self, message: str, ptxas_output: str):
        super().__init__(message)
        self.ptxas_output = ptxas_output


def _nvidia_roots() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _candidates(relative: str) -> list[Path]:
    return [root / d / relative for root in _nvidia_roots() for d in _TOOLKIT_DIRS]


def find_ptxas() -> Path:
    """The ptxas executable: ``$HERON_PTXAS``, the nvidia wheel, then ``PATH``."""
    override = os.environ.get("HERON_PTXAS")
    if override:
        return Path(override)
    for path in _candidates("bin/ptxas"):
        if path.is_file():
            return path
    found = shutil.which("ptxas")
    if found:
        return Path(found)
    raise ToolNotFoundError(
        "ptxas not found: install the 'nvidia-cuda-nvcc' wheel (part of"
        f" {COMPILE_EXTRA!r}), put ptxas on PATH, or set HERON_PTXAS"
    )


def find_nvdisasm() -> Path:
    """The nvdisasm executable (SASS of a cubin, for ``heron xla`` and the benchmarks):
    ``$HERON_NVDISASM``, the ``nvidia-cuda-nvdisasm`` wheel, then ``PATH``."""
    override = os.environ.get("HERON_NVDISASM")
    if override:
        return Path(override)
    for path in _candidates("bin/nvdisasm"):
        if path.is_file():
            return path
    found = shutil.which("nvdisasm")
    if found:
        return Path(found)
    raise ToolNotFoundError(
        "nvdisasm not found: install the 'nvidia-cuda-nvdisasm' wheel (part of"
        f" {COMPILE_EXTRA!r}), put nvdisasm on PATH, or set HERON_NVDISASM"
    )


def find_libdevice() -> Path:
    """``libdevice.10.bc``: ``$HERON_LIBDEVICE``, the nvidia wheel, then ``$CUDA_HOME``."""
    override = os.environ.get("HERON_LIBDEVICE")
    if override:
        return Path(override)
    relative = "nvvm/libdevice/libdevice.10.bc"
    candidates = _candidates(relative)
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        candidates.append(Path(cuda_home) / relative)
    for path in candidates:
        if path.is_file():
            return path
    raise ToolNotFoundError(
        "libdevice.10.bc not found (math ops lower to libdevice calls): install the"
        f" 'nvidia-cuda-nvcc' wheel (part of {COMPILE_EXTRA!r}) or set HERON_LIBDEVICE"
    )


def cubin_assembler() -> str:
    """What turns PTX into cubins here, in words: nvJitLink in this process (see
    :mod:`heron.runtime.cuda.nvjitlink_assembler`), or the ptxas executable where
    ``$HERON_PTXAS`` names one or nvJitLink cannot be loaded. Raises
    :class:`ToolNotFoundError` when neither is here (the ``cubin`` stage is then
    skipped, saying why)."""
    if _in_process():
        from cuda.bindings import nvjitlink

        major, minor = nvjitlink.version()
        return f"nvJitLink {major}.{minor} (in process)"
    try:
        return f"ptxas ({find_ptxas()})"
    except ToolNotFoundError as exc:
        unavailable = nvjitlink_assembler.unavailable_reason()
        if unavailable is None:
            raise
        raise ToolNotFoundError(f"{exc}; nvJitLink cannot assemble either: {unavailable}") from None


def _in_process() -> bool:
    """Whether PTX is assembled by nvJitLink: it loads, and no ``$HERON_PTXAS`` asks
    for an executable of the user's choosing."""
    return not os.environ.get("HERON_PTXAS") and nvjitlink_assembler.unavailable_reason() is None


def _run_ptxas(ptx: str, arch: str, opt_level: int | None, keep_output: bool) -> bytes:
    """Assemble ``ptx``; the cubin's bytes when ``keep_output``, else ``b""``."""
    return _run_ptxas_on({"kernel": ptx}, arch, opt_level, keep_output)


def _run_ptxas_on(
    modules: Mapping[str, str], arch: str, opt_level: int | None, keep_output: bool
) -> bytes:
    """Assemble the PTX ``modules`` (file name -> text) into one cubin holding them all:
    in this process through nvJitLink where it loads, else with one ptxas process."""
    if _in_process():
        try:
            return nvjitlink_assembler.assemble(modules, arch, opt_level, keep_output)
        except nvjitlink_assembler.NvJitLinkRejected as exc:
            raise PtxasError(
                f"ptxas rejected the PTX for {arch} (nvJitLink):\n{exc.log}", exc.log
            ) from None
    ptxas = find_ptxas()
    extra = () if opt_level is None else (f"-O{opt_level}",)
    with tempfile.TemporaryDirectory(prefix="heron-ptxas-") as tmp:
        sources = []
        for name, ptx in modules.items():
            source = Path(tmp) / f"{name}.ptx"
            source.write_text(ptx)
            sources.append(str(source))
        output = Path(tmp) / "kernel.cubin" if keep_output else Path(os.devnull)
        result = subprocess.run(
            [str(ptxas), "--gpu-name", arch, *extra, "-o", str(output), *sources],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            message = (result.stderr or result.stdout).strip()
            raise PtxasError(
                f"ptxas rejected the PTX for {arch} (exit {result.returncode}):\n{message}",
                message,
            )
        return output.read_bytes() if keep_output else b""


def validate_ptx(ptx: str, arch: str) -> None:
    """Assemble ``ptx`` for ``arch`` and throw the result away; raise ``PtxasError`` if rejected."""
    _run_ptxas(ptx, arch, None, keep_output=False)


def assemble_cubin(ptx: str, arch: str, opt_level: int = 3) -> bytes:
    """Assemble ``ptx`` to a cubin for ``arch`` with ptxas (``-O{opt_level}``)."""
    return _run_ptxas(ptx, arch, opt_level, keep_output=True)


def assemble_cubins(modules: Mapping[str, str], arch: str, opt_level: int = 3) -> bytes:
    """Assemble several PTX modules (a name each, unique: its file's, which ptxas's
    messages quote) into one cubin for ``arch`` in one ptxas run (``-O{opt_level}``).

    A ptxas run has a fixed cost (starting the executable: 11 ms for a tiny kernel; nvJitLink's
    5 ms), more than it takes to assemble a typical fusion's kernel, so a
    program pays it once; each kernel's machine code is what it would be alone
    (the modules share no symbol but their kernels' distinct names). XLA:GPU
    likewise makes one cubin of a module's kernels.
    """
    if not modules:
        raise ValueError("assemble_cubins: no PTX module given")
    return _run_ptxas_on(modules, arch, opt_level, keep_output=True)
