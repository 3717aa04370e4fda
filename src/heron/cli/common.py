"""What several subcommands share: reading a module from a file, the error type."""

from __future__ import annotations

from pathlib import Path

from heron.hlo.ir import Module


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
