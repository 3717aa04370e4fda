"""The ``input_output_alias`` of an ``HloModule`` line: buffer donation.

``jax.jit(f, donate_argnums=...)`` gives the caller's argument buffers to the
program, and the module header says which result may be written into which
argument's bytes::

    HloModule jit_f, input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {}, must-alias) }

Each entry is ``output shape index: (parameter number, parameter shape index
[, kind])``. XLA makes the aliased result live in the parameter's buffer
(buffer assignment places both in one allocation) and copy insertion adds a
copy only where the parameter's old value is still needed after the result is
written. heron does the same (:mod:`heron.hlo.passes.copy_insertion`,
:mod:`heron.hlo.buffers.dataflow`, :mod:`heron.hlo.buffers.assignment`), and
honours ``may-alias`` and ``must-alias`` alike: the result is always placed in
the parameter's bytes (``may-alias`` lets XLA decline; heron never does).

The parser keeps the value typed in ``module.header["input_output_alias"]``
(printing gives the same text back) and refuses an alias that names an output
or parameter leaf the entry does not have, leaves of different shapes or
element types, or one parameter leaf for two outputs. Their layouts may differ
as jax prints them (an optax step declares some results column-major over
row-major parameters): layout assignment gives the output its parameter's
layout (:func:`heron.hlo.passes.layouts.assign_layouts`), as XLA's layout
assignment constrains an aliased output, and from then on they must agree. The verifier checks it
again after every pass, so a pass that changes the entry's parameters or
result in a way the alias no longer fits is caught where it happens.
"""

from __future__ import annotations

import re

import attrs

from heron.hlo.errors import HloVerifyError, SourceLocation
from heron.hlo.ir import Module
from heron.hlo.lexer import Cursor
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

__all__ = [
    "ALIAS_KINDS",
    "AliasEntry",
    "InputOutputAlias",
    "check_input_output_alias",
    "format_input_output_alias",
    "input_output_aliases",
    "leaf_number",
    "parse_input_output_alias",
]

#: The header attribute's name.
HEADER_KEY = "input_output_alias"

#: The kinds XLA spells; heron treats both as "the result lives in the parameter's bytes".
ALIAS_KINDS = ("may-alias", "must-alias")

_KIND = re.compile(r"[a-z][a-z\-]*")


@attrs.frozen
class AliasEntry:
    """Output leaf ``output_index`` lives in leaf ``parameter_index`` of parameter
    ``parameter_number``. ``kind`` is None when the text gave none (XLA then means
    may-alias); it is kept so that the text prints back as written."""

    output_index: tuple[int, ...]
    parameter_number: int
    parameter_index: tuple[int, ...]
    kind: str | None = "may-alias"

    def __str__(self) -> str:
        kind = f", {self.kind}" if self.kind is not None else ""
        return (
            f"{_index(self.output_index)}: ({self.parameter_number},"
            f" {_index(self.parameter_index)}{kind})"
        )


@attrs.frozen
class InputOutputAlias:
    """The header attribute's value: its entries in text order."""

    entries: tuple[AliasEntry, ...]


def _index(index: tuple[int, ...]) -> str:
    return "{" + ",".join(str(i) for i in index) + "}"


# -- text ---------------------------------------------------------------------------


def _shape_index(cur: Cursor) -> tuple[int, ...]:
    cur.expect("{", "to start a shape index")
    index: list[int] = []
    if cur.accept("}"):
        return ()
    while True:
        index.append(cur.integer("a shape index element"))
        if cur.accept("}"):
            return tuple(index)
        cur.expect(",", "or '}' in a shape index")


def parse_input_output_alias(cur: Cursor) -> InputOutputAlias:
    """``{ {out}: (param, {index}[, kind]), ... }``, as XLA prints it."""
    cur.expect("{", "to start input_output_alias")
    entries: list[AliasEntry] = []
    if cur.accept("}"):
        return InputOutputAlias(())
    while True:
        output = _shape_index(cur)
        cur.expect(":", "after an input_output_alias output index")
        cur.expect("(", "to start an input_output_alias parameter")
        number = cur.integer("a parameter number")
        cur.expect(",", "after the parameter number")
        index = _shape_index(cur)
        kind: str | None = None
        if cur.accept(","):
            pos = cur.skip()
            kind = cur.require(_KIND, "may-alias or must-alias").group(0)
            if kind not in ALIAS_KINDS:
                raise cur.error(
                    f"input_output_alias kind '{kind}' is not one of {', '.join(ALIAS_KINDS)}",
                    pos,
                )
        cur.expect(")", "to close an input_output_alias parameter")
        entries.append(AliasEntry(output, number, index, kind))
        if cur.accept("}"):
            return InputOutputAlias(tuple(entries))
        cur.expect(",", "or '}' in input_output_alias")


def format_input_output_alias(value: InputOutputAlias) -> str:
    if not value.entries:
        return "{}"
    return "{ " + ", ".join(str(e) for e in value.entries) + " }"


# -- meaning ------------------------------------------------------------------------


def input_output_aliases(module: Module) -> tuple[AliasEntry, ...]:
    """The module's alias entries (none when its header has no ``input_output_alias``)."""
    value = module.header.get(HEADER_KEY)
    return value.entries if isinstance(value, InputOutputAlias) else ()


def subshape(shape: Shape, index: tuple[int, ...]) -> Shape | None:
    """The shape at ``index`` in ``shape``, or None when there is none."""
    for i in index:
        if not isinstance(shape, TupleShape) or not 0 <= i < len(shape.elements):
            return None
        shape = shape.elements[i]
    return shape


def leaf_number(shape: Shape, index: tuple[int, ...]) -> int:
    """The depth-first leaf number of the array at ``index`` (how dataflow numbers leaves)."""
    number = 0
    for i in index:
        assert isinstance(shape, TupleShape)
        number += sum(sum(1 for _ in e.leaves()) for e in shape.elements[:i])
        shape = shape.elements[i]
    return number


def check_input_output_alias(module: Module, location: SourceLocation | None = None) -> None:
    """Refuse an alias the entry cannot honour (HloVerifyError naming the entry and why)."""
    value = module.header.get(HEADER_KEY)
    if value is None:
        return
    if not isinstance(value, InputOutputAlias):
        raise HloVerifyError(
            f"module '{module.name}': input_output_alias is not an alias table ({value!r})",
            location,
        )
    entry = module.entry
    root = entry.root_instruction.shape
    parameters = {p.parameter_number: p for p in entry.parameters}
    outputs: dict[tuple[int, ...], AliasEntry] = {}
    leaves: dict[tuple[int, tuple[int, ...]], AliasEntry] = {}
    for alias in value.entries:

        def refuse(why: str, alias: AliasEntry = alias) -> HloVerifyError:
            return HloVerifyError(
                f"module '{module.name}': input_output_alias entry '{alias}': {why}", location
            )

        out = subshape(root, alias.output_index)
        if out is None:
            raise refuse(f"the entry's result ({root}) has no output {_index(alias.output_index)}")
        param = parameters.get(alias.parameter_number)
        if param is None:
            raise refuse(
                f"the entry has no parameter {alias.parameter_number}"
                f" ({len(parameters)} parameters)"
            )
        into = subshape(param.shape, alias.parameter_index)
        if into is None:
            raise refuse(
                f"parameter {alias.parameter_number} ({param.shape}) has no shape index"
                f" {_index(alias.parameter_index)}"
            )
        if not isinstance(out, ArrayShape) or not isinstance(into, ArrayShape):
            raise refuse(f"output {out} and parameter leaf {into} must both be arrays")
        if not out.same_type_and_dims(into):
            raise refuse(
                f"output {_index(alias.output_index)} is {out}, parameter"
                f" {alias.parameter_number} {_index(alias.parameter_index)} is {into}:"
                " an aliased result must have its parameter's element type and dimensions"
            )
        if (
            module.layouts_assigned
            and out.layout is not None
            and into.layout is not None
            and out.minor_to_major != into.minor_to_major
        ):
            raise refuse(
                f"output {out} and parameter {into} have different layouts (one buffer holds both)"
            )
        if out.is_token:
            raise refuse("a token has no bytes to share")
        if alias.output_index in outputs:
            raise refuse(
                f"output {_index(alias.output_index)} is aliased twice (also by"
                f" '{outputs[alias.output_index]}')"
            )
        key = (alias.parameter_number, alias.parameter_index)
        if key in leaves:
            raise refuse(
                f"parameter {alias.parameter_number} {_index(alias.parameter_index)} is"
                f" already aliased by output {_index(leaves[key].output_index)}; one"
                " parameter buffer can hold one result"
            )
        outputs[alias.output_index] = alias
        leaves[key] = alias
