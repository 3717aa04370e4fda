"""Linking an AMDGPU object into a loadable code object (HSACO) with lld.

The HIP runtime loads a shared ELF, not the relocatable object the code
generator writes, so one link step is needed. lld is the only linker that
knows AMDGPU; the ``ziglang`` wheel ships it (``python -m ziglang ld.lld``),
so no system ROCm is needed. ``HERON_LD_LLD`` (a path) or an ``ld.lld`` on
``PATH`` are used first when present.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from heron.runtime.rocm.compiler_mlir import COMPILE_EXTRA

EM_AMDGPU = 224


class ToolNotFoundError(FileNotFoundError):
    """No lld to link the code object with."""


class LinkError(RuntimeError):
    """lld failed; the message quotes it."""


def lld_command() -> list[str]:
    """The command prefix that runs lld in its ELF flavour."""
    override = os.environ.get("HERON_LD_LLD")
    if override:
        return [override]
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "ld.lld"]
    found = shutil.which("ld.lld")
    if found:
        return [found]
    raise ToolNotFoundError(
        "no lld to link the AMDGPU code object: install 'ziglang' (part of"
        f" {COMPILE_EXTRA!r}), put ld.lld on PATH, or set HERON_LD_LLD"
    )


def link_hsaco(object_code: bytes) -> bytes:
    """A relocatable AMDGPU object -> a shared code object the HIP runtime loads.

    ``--no-undefined`` turns a call to a function nobody defines (an OCML
    routine, say) into a link error here instead of a load failure on the GPU.
    The result is checked to be an AMDGPU ELF (:func:`elf_machine`): this is
    the one place an HSACO is made, so the one place that checks it.
    """
    with tempfile.TemporaryDirectory(prefix="heron-lld-") as tmp:
        obj = Path(tmp) / "kernel.o"
        out = Path(tmp) / "kernel.hsaco"
        obj.write_bytes(object_code)
        result = subprocess.run(
            [*lld_command(), "-shared", "--no-undefined", str(obj), "-o", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            message = (result.stderr or result.stdout).strip()
            raise LinkError(f"ld.lld failed to link the AMDGPU code object:\n{message}")
        hsaco = out.read_bytes()
    try:
        machine = elf_machine(hsaco)
    except ValueError as exc:
        raise LinkError(f"ld.lld wrote something that is not an ELF image: {exc}") from exc
    if machine != EM_AMDGPU:
        raise LinkError(f"the linked code object is not an AMDGPU ELF (e_machine {machine})")
    return hsaco


def elf_machine(image: bytes) -> int:
    """The ``e_machine`` field of an ELF64 little-endian image (224 is AMDGPU)."""
    if image[:4] != b"\x7fELF" or len(image) < 20:
        raise ValueError("not an ELF image")
    return struct.unpack_from("<H", image, 18)[0]
