"""The module a user means when handing heron an XLA dump folder (``--xla_dump_to``).

XLA writes, per compiled module, ``module_NNNN.NAME.before_optimizations.txt``
(the HLO as the framework gave it: what heron compiles) beside its own
optimized modules, buffer assignments and LLVM IR. A JAX program usually
dumps helpers too (``jit_broadcast_in_dim`` for ``jnp.ones``, ...), so a
folder with several modules needs a selector: the module's number
(``0004``, ``4``) or its name (``jit__lambda``, or ``jit_f`` for
``module_0003.jit_f``). With one module the selector may be left out.
Anything else is refused with the candidates listed.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs

from heron.hlo.errors import HloError

__all__ = ["DumpedModule", "XlaDumpError", "dumped_modules", "is_xla_dump", "pick_module"]

SUFFIX = ".before_optimizations.txt"
_NAME = re.compile(r"module_(\d+)\.(.+)" + re.escape(SUFFIX) + r"\Z")


class XlaDumpError(HloError):
    """The folder is no XLA dump, or which module it means is not clear."""


@attrs.frozen
class DumpedModule:
    """One module of a dump: its number, its name and its pre-optimization HLO file."""

    number: int
    name: str
    path: Path

    def __str__(self) -> str:
        return f"module_{self.number:04d}.{self.name}"


def dumped_modules(folder: Path) -> list[DumpedModule]:
    """The dump's modules with a pre-optimization HLO file, by number."""
    modules = []
    for path in Path(folder).iterdir():
        match = _NAME.match(path.name)
        if match and path.is_file():
            modules.append(DumpedModule(int(match.group(1)), match.group(2), path))
    return sorted(modules, key=lambda m: (m.number, m.name))


def is_xla_dump(folder: Path) -> bool:
    """Whether ``folder`` holds at least one module XLA dumped as text."""
    return Path(folder).is_dir() and bool(dumped_modules(folder))


def pick_module(folder: Path, selector: str | None = None) -> DumpedModule:
    """The module ``selector`` names in the dump ``folder`` (see the module docstring)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise XlaDumpError(f"{folder}: not a folder")
    modules = dumped_modules(folder)
    if not modules:
        raise XlaDumpError(
            f"{folder}: no '*{SUFFIX}' file: not an XLA dump folder (dump with"
            " XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_as_text')"
        )
    if selector is None:
        if len(modules) == 1:
            return modules[0]
        raise XlaDumpError(
            f"{folder} holds {len(modules)} modules; name one with --module"
            f" (a number or a name): {_listing(modules)}"
        )
    chosen = [m for m in modules if _matches(m, selector)]
    if len(chosen) == 1:
        return chosen[0]
    if not chosen:
        raise XlaDumpError(f"{folder}: no module '{selector}'; it holds {_listing(modules)}")
    raise XlaDumpError(f"{folder}: '{selector}' names {len(chosen)} modules: {_listing(chosen)}")


def _matches(module: DumpedModule, selector: str) -> bool:
    text = selector.strip()
    if text.isdigit():
        return int(text) == module.number
    return text in (module.name, str(module))


def _listing(modules: list[DumpedModule]) -> str:
    return ", ".join(str(m) for m in modules)
