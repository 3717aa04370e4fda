"""What every host-backed library call's thunk is made of, for the custom calls whose
library call heron's host code stands beside (convolution, attention and its
backward pass, FFT).

Each of those modules describes its call (its contract's attributes) from the
instruction; the thunk is then the same for all: the call, its operands and results
as arguments, and the custom call's host thunk as the fallback a device without the
library runs. A description the call cannot take is refused naming the custom call
and its target, never as a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.runtime.core.library_contract import LibraryContract
from heron.runtime.core.thunks import BufferSlice, CustomCallThunk, LibraryCallThunk, ThunkError

__all__ = ["described_or_refused", "host_backed_call"]

#: What a call's description raises when the instruction is not one the contract takes.
_DESCRIPTION_ERRORS = (ValueError, UnsupportedError, ThunkError)

Described = TypeVar("Described")


def described_or_refused(
    inst: Instruction, call_target: str, describe: Callable[[Instruction], Described]
) -> Described:
    """``describe(inst)``, or an UnsupportedError naming the custom call, its target and why."""
    try:
        return describe(inst)
    except _DESCRIPTION_ERRORS as error:
        raise UnsupportedError(
            f"custom-call '{inst.name}' ({call_target}): {error}", inst.location
        ) from None


def host_backed_call(
    library: str,
    call: LibraryContract,
    arguments: Sequence[BufferSlice],
    host: CustomCallThunk,
) -> LibraryCallThunk:
    """``call`` to ``library`` over ``arguments`` (operands, then results), with the
    custom call's ``host`` thunk beside it as its fallback."""
    return LibraryCallThunk(
        library=library,
        operation=call.operation,
        attributes=call.attributes(),
        arguments=tuple(arguments),
        fallback=(host,),
        fallback_emitter="host",
    )
