"""What several subcommands share: reading a module, ``--target/--arch``, the error type."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Module

if TYPE_CHECKING:
    from heron.target import Target

#: How an error names each backend's architectures ("not an NVIDIA architecture").
_VENDOR = {"cuda": "NVIDIA", "rocm": "AMDGPU"}


class CommandError(Exception):
    """A user error the command reports in one line (exit status 2)."""


def load_module(path: str, verify: bool = True, module_name: str | None = None) -> Module:
    """Parse (and verify) the HLO module in ``path``; CommandError if it cannot be read.

    ``path`` may be an XLA dump folder (``--xla_dump_to``): its pre-optimization
    module is read, the one ``module_name`` names when it holds several
    (:mod:`heron.hlo.xla_dump`).
    """
    from heron.hlo.parser import parse_module_file
    from heron.hlo.verifier import verify_module
    from heron.hlo.xla_dump import XlaDumpError, pick_module

    file = Path(path)
    if not file.exists():
        raise CommandError(f"{path}: no such file")
    if file.is_dir():
        try:
            file = pick_module(file, module_name).path
        except XlaDumpError as error:
            raise CommandError(error.message) from None
    elif module_name is not None:
        raise CommandError(f"--module {module_name}: {path} is a file, not an XLA dump folder")
    if not file.is_file():
        raise CommandError(f"{path}: not a file")
    try:
        module = parse_module_file(file)
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if verify:
        verify_module(module)
    return module


def refuse_tiled_layouts(module: Module, where: str) -> None:
    """UnsupportedError at the first instruction whose layout has tiling (``{1,0:T(8,128)}``).

    Kernels are compiled for minor-to-major orders only; a tiled buffer would be
    read as if it were not tiled. Refused up front, at the instruction's location,
    instead of deep in the device's upload without one.
    """
    for inst in module.instructions():
        for leaf in inst.shape.leaves():
            layout = leaf.layout
            if layout is not None and layout.is_tiled:
                raise UnsupportedError(
                    f"{inst.opcode} '{inst.name}': layout {layout} has tiling; {where}"
                    " supports only minor-to-major orders",
                    inst.location,
                )


def add_target_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--target NAME`` and ``--arch ARCH``: the device ``what`` is for (``Target.resolve``)."""
    parser.add_argument(
        "--target",
        metavar="NAME",
        help=f"the device {what}: a preset ('heron targets' lists them), or cuda/rocm for"
        " that backend's default (h100, mi300x); default h100",
    )
    parser.add_argument(
        "--arch",
        metavar="ARCH",
        help="the GPU architecture (sm_80, sm_90a, gfx942, ...): alone, it picks the preset of"
        " that arch; with --target, it replaces the preset's arch (same vendor)",
    )


def resolve_target(args: argparse.Namespace, backend: str | None = None) -> Target:
    """The Target ``--target``/``--arch`` name (for ``backend`` when given); one-line errors."""
    from heron.target import BACKENDS, Target, TargetError

    target, arch = args.target, args.arch
    if target in BACKENDS and arch is not None:
        # "--target cuda --arch gfx942": say which vendor the arch is not, before
        # resolve() says that the gfx942 preset is not a CUDA device.
        try:
            arch_backend = Target.for_arch(arch).backend
        except TargetError as exc:
            raise CommandError(exc.message) from exc
        if arch_backend != target:
            raise CommandError(
                f"--arch {arch}: not an {_VENDOR[target]} architecture (--target {target});"
                f" it is a {arch_backend} one"
            )
    try:
        return Target.resolve(target, arch, backend)
    except TargetError as exc:
        raise CommandError(exc.message) from exc


# -- output files ---------------------------------------------------------------------


def check_output_directory(directory: Path, option: str, create: bool = False) -> None:
    """CommandError unless files can be created in ``directory`` (made first if ``create``)."""
    if create and not directory.exists():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CommandError(
                f"{option}: cannot create directory {directory}: {exc.strerror or exc}"
            ) from exc
    if not directory.exists():
        raise CommandError(f"{option}: directory {directory} does not exist")
    if not directory.is_dir():
        raise CommandError(f"{option}: {directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CommandError(f"{option}: directory {directory} is not writable")
    try:  # what os.access cannot tell: a read-only mount, /proc, root's own limits
        fd, probe = tempfile.mkstemp(prefix=".heron-probe.", dir=directory)
    except OSError as exc:
        raise CommandError(
            f"{option}: cannot create files in directory {directory}: {exc.strerror or exc}"
        ) from exc
    os.close(fd)
    os.unlink(probe)


def check_output_file(path: Path, option: str) -> None:
    """CommandError unless ``path`` can be written as a regular file (checked before any work).

    Its directory must exist and be writable; an existing ``path`` must be a
    regular file (not a directory, a device such as /dev/full, a FIFO).
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise CommandError(f"{option} {path}: {exc.strerror or exc}") from exc
    if mode is not None and stat.S_ISDIR(mode):
        raise CommandError(f"{option} {path}: is a directory, not a file")
    if mode is not None and not stat.S_ISREG(mode):
        raise CommandError(
            f"{option} {path}: not a regular file (a device, FIFO or socket); give a file name"
        )
    check_output_directory(path.parent, f"{option} {path}")


@contextlib.contextmanager
def atomic_output(path: Path, option: str) -> Iterator[Path]:
    """A temporary path beside ``path``; renamed onto ``path`` when the block succeeds.

    Readers of ``path`` see the old file or the whole new one, never a part;
    on failure the temporary file is removed and ``path`` is untouched.
    """
    check_output_file(path, option)
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise CommandError(f"{option} {path}: cannot write: {exc.strerror or exc}") from exc
    os.close(fd)
    try:
        yield Path(temporary)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except OSError as exc:
        raise CommandError(f"{option} {path}: cannot write: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def write_atomically(path: Path, data: bytes, option: str) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_output`."""
    with atomic_output(path, option) as temporary:
        temporary.write_bytes(data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
