"""Typed values of instruction attributes.

An instruction keeps its attributes in an ordered ``dict[str, value]``. The
value's Python type says how it is spelled in text:

===========================  =================================================
value                        example in HLO text
===========================  =================================================
``int``                      ``index=0``, ``iota_dimension=1``
``bool``                     ``is_stable=true``, ``unique_indices=true``
``float``                    ``epsilon=0.001`` (batch-norm)
``str``                      ``direction=GT``, ``kind=kLoop`` (a bare word)
``QuotedString``             ``custom_call_target="foo"``
``tuple[int, ...]``          ``dimensions={0,1}``, ``slice_sizes={1,4}``
``tuple[SliceRange, ...]``   ``slice={[0:4], [2:8:2]}``
``PaddingConfig``            ``padding=0_0x1_2_1``
``Window``                   ``window={size=3x3 stride=2x2 pad=1_1x1_1}``
``ConvDimensionNumbers``     ``dim_labels=b01f_01io->b01f``
``ComputationRef``           ``to_apply=%add``, ``calls=%fused``
``tuple[ComputationRef...]`` ``branch_computations={%a, %b}``
``InstructionRefs``          ``control-predecessors={%a, %b}``
``KeyValueList``             ``metadata={op_name="x" source_line=3}``
``RawAttribute``             anything else, kept verbatim (``backend_config``,
                             ``sharding``, ``output_to_operand_aliasing``,
                             unknown attributes)
===========================  =================================================

Computation references name a computation; after a module is parsed they are
resolved (``ComputationRef.computation`` points at it) so passes can follow
them without a lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from heron.hlo.ir import Computation


@attrs.frozen
class QuotedString:
    """A double-quoted string attribute value (text is unescaped)."""

    text: str


@attrs.frozen
class RawAttribute:
    """An attribute value heron keeps but does not interpret, as written."""

    text: str


@attrs.frozen
class SliceRange:
    start: int
    limit: int
    stride: int = 1


@attrs.frozen
class PadDim:
    low: int
    high: int
    interior: int = 0


@attrs.frozen
class PaddingConfig:
    dims: tuple[PadDim, ...]


@attrs.frozen
class WindowDim:
    size: int
    stride: int = 1
    pad_low: int = 0
    pad_high: int = 0
    window_dilation: int = 1
    base_dilation: int = 1
    window_reversal: bool = False


@attrs.frozen
class Window:
    dims: tuple[WindowDim, ...]


@attrs.frozen
class ConvDimensionNumbers:
    """Convolution dimension numbers, as ``dim_labels=b01f_01io->b01f`` spells them.

    Spatial dimension lists are ordered by spatial index (0, 1, ...).
    """

    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]


@attrs.define(eq=False)
class ComputationRef:
    """A reference to a computation by name, resolved after parsing."""

    name: str
    computation: Computation | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ComputationRef) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


@attrs.frozen
class InstructionRefs:
    """Names of instructions (control predecessors)."""

    names: tuple[str, ...]


@attrs.frozen
class KeyValueList:
    """``{key=value key2="value"}``: metadata, frontend attributes, statistics.

    Values are kept as the text that follows ``=`` (quoted strings unescaped
    and marked by ``QuotedString``) so printing gives back what was read.
    """

    items: tuple[tuple[str, Any], ...]

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self.items:
            if k == key:
                return v
        return default


#: Attributes that name one computation.
COMPUTATION_ATTRIBUTES = frozenset(
    {
        "to_apply",
        "calls",
        "condition",
        "body",
        "select",
        "scatter",
        "true_computation",
        "false_computation",
        "comparator",
    }
)

#: Attributes that name a list of computations.
COMPUTATION_LIST_ATTRIBUTES = frozenset({"branch_computations", "called_computations"})
