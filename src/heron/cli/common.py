"""What several subcommands share: reading a module, ``--target/--arch``, the error type."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Module

if TYPE_CHECKING:
    from heron.compiler.target import Target

#: How an error names each backend's architectures ("not an NVIDIA architecture").
_VENDOR = {"cuda": "NVIDIA", "rocm": "AMDGPU"}


class CommandError(Exception):
    """A user error the command reports in one line (exit status 2)."""


def load_module(path: str, verify: bool = True) -> Module:
    """Parse (and verify) the HLO module in ``path``; CommandError if it cannot be read."""
    from heron.hlo.parser import parse_module_file
    from heron.hlo.verifier import verify_module

    file = Path(path)
    if not file.exists():
        raise CommandError(f"{path}: no such file")
    if not file.is_file():
        raise CommandError(f"{path}: not a file")
    try:
        module = parse_module_file(file)
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if verify:
        verify_module(module)
    return module


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
    from heron.compiler.target import BACKENDS, Target

    target, arch = args.target, args.arch
    if target in BACKENDS and arch is not None:
        # "--target cuda --arch gfx942": say which vendor the arch is not, before
        # resolve() says that the gfx942 preset is not a CUDA device.
        try:
            arch_backend = Target.for_arch(arch).backend
        except UnsupportedError as exc:
            raise CommandError(exc.message) from exc
        if arch_backend != target:
            raise CommandError(
                f"--arch {arch}: not an {_VENDOR[target]} architecture (--target {target});"
                f" it is a {arch_backend} one"
            )
    try:
        return Target.resolve(target, arch, backend)
    except UnsupportedError as exc:
        raise CommandError(exc.message) from exc
