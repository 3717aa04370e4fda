"""The HLO text XLA compiles: the module heron parsed, printed whole, with layouts.

A corpus file is a bare fused computation; heron's parser gives it an ENTRY
that calls it through a fusion (``heron.hlo.parser.synthesise_entry``), and
that ENTRY is printed here too, so XLA compiles the very module heron
compiles. Deviceless XLA:GPU CHECK-fails on array shapes without a layout
inside fused computations: each one gets the default (major-to-minor) layout.
A module whose entry already holds fusions is compiled with XLA's layout
assignment off (it would rewrite the given layouts); a module without fusions
goes through XLA's whole pipeline, fusion decisions included.
"""

from __future__ import annotations

import re

from heron.hlo.ir import Module
from heron.hlo.printer import print_computation, print_module

# An array shape (element type, dimensions) not followed by a layout.
_SHAPE_WITHOUT_LAYOUT = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,\s]+)\](?!\s*\{)")


def with_default_layouts(text: str) -> str:
    """``text`` with ``{n-1,...,0}`` after every array shape that has no layout."""

    def add_layout(match: re.Match) -> str:
        rank = len([d for d in match.group(2).split(",") if d.strip()])
        order = ",".join(str(i) for i in range(rank - 1, -1, -1))
        return f"{match.group(0)}{{{order}}}"

    return _SHAPE_WITHOUT_LAYOUT.sub(add_layout, text)


def is_prefused(module: Module) -> bool:
    """True when the entry computation already calls fusions (keep XLA's hands off them)."""
    entry = module.entry
    return entry is not None and any(inst.opcode == "fusion" for inst in entry.instructions)


def xla_module_text(module: Module) -> str:
    """The whole module, ENTRY included, every array shape with a layout."""
    text = print_module(module)
    if not re.search(r"^ENTRY\b", text, re.MULTILINE) and module.entry is not None:
        text = text.rstrip() + "\n\n" + print_computation(module.entry) + "\n"
    return with_default_layouts(text)


def xla_options(module: Module) -> dict[str, object]:
    """The DebugOptions overrides for ``module``: dumps, and layouts kept when prefused."""
    options: dict[str, object] = {"xla_dump_emitter_re": ".*"}
    if is_prefused(module):
        options["xla_disable_hlo_passes"] = "layout-assignment"
    return options
