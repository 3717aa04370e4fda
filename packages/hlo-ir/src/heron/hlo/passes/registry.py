"""Passes by name: what ``heron opt --passes a,b`` and plugins look passes up in.

A pass module registers its pass with :func:`hlo_pass` when imported; a
second pass under a taken name is refused (two passes answering to one name
would make ``--passes`` and dumps ambiguous). The GPU passes of the compiler
package register into the same table.
"""

from __future__ import annotations

from collections.abc import Callable

from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Module
from heron.hlo.passes.manager import HloPass

__all__ = ["PASSES", "hlo_pass", "pass_named", "register_pass"]

#: Pass name -> pass, in registration order.
PASSES: dict[str, HloPass] = {}


def register_pass(step: HloPass) -> HloPass:
    """Add ``step`` to :data:`PASSES`; a name already taken is an error."""
    if step.name in PASSES:
        raise UnsupportedError(f"an HLO pass named {step.name!r} is already registered")
    PASSES[step.name] = step
    return step


Rewrite = Callable[[Module], bool]


def hlo_pass(name: str, description: str) -> Callable[[Rewrite], Rewrite]:
    """Decorator: register ``run(module) -> changed`` as pass ``name``; the function stays as is."""

    def register(run: Rewrite) -> Rewrite:
        register_pass(HloPass(name, run, description))
        return run

    return register


def pass_named(name: str) -> HloPass:
    """The registered pass called ``name``; an unknown name lists the known ones."""
    try:
        return PASSES[name]
    except KeyError:
        known = ", ".join(sorted(PASSES)) or "none"
        raise UnsupportedError(f"unknown HLO pass {name!r} (known passes: {known})") from None
