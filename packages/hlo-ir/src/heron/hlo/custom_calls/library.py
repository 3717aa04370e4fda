"""heron's own custom calls that a library computes: which they are, and what they stand for.

The compiler hands a library what the library does faster than heron's
kernels (a convolution to cuDNN, an attention and its backward pass to
cuDNN's flash attention) or what no kernel of heron's computes (an FFT, to
cuFFT) as one of heron's custom calls (:mod:`.convolution`, :mod:`.attention`,
:mod:`.attention_backward`, :mod:`.fft`). Each
has one meaning, the computation it replaced, but a library sums in an order
of its own: a check compares what such a call reaches within the
reassociation bounds, as it does a dot. :func:`library_call_target` says
whether an instruction is one of them; :func:`stood_for` gives the
instruction whose precision decides its operands' rounding (the convolution
rebuilt; None for an attention or its backward pass, whose half-precision
products are exact in f32).
"""

from __future__ import annotations

from heron.hlo.attributes import QuotedString
from heron.hlo.custom_calls import attention, attention_backward, convolution, fft
from heron.hlo.custom_calls.call import custom_call_of
from heron.hlo.ir import Instruction

__all__ = ["LIBRARY_TARGETS", "library_call_target", "stood_for"]

#: The custom_call_targets of heron's library calls.
LIBRARY_TARGETS = frozenset(
    {convolution.TARGET, attention.TARGET, attention_backward.TARGET, fft.TARGET}
)


def library_call_target(inst: Instruction) -> str:
    """The target of ``inst`` where it is one of heron's library custom calls, else ``""``."""
    if inst.opcode != "custom-call":
        return ""
    target = inst.attributes.get("custom_call_target")
    if isinstance(target, QuotedString) and target.text in LIBRARY_TARGETS:
        return target.text
    return ""


def stood_for(inst: Instruction) -> Instruction | None:
    """The convolution a library convolution call stands for (its precision attributes);
    None for any other instruction."""
    if library_call_target(inst) != convolution.TARGET:
        return None
    return convolution.as_convolution(custom_call_of(inst))
