"""Arguments and results in ``.npz`` files, including element types numpy lacks.

``heron run`` reads a computation's arguments from an ``.npz`` file and writes
its results to one. An ``.npz`` holds numpy's own dtypes only: numpy writes a
bf16, fp8, f4 or 2/4-bit integer array (an ml_dtypes type) as raw bytes
(``|V2``, ``|V1``) that load back as untyped void, or, for f8e5m2, as ``<f1``,
which numpy cannot load at all. So heron stores such values *widened exactly*
and says what they really are beside them.

Outputs (``save_outputs``): leaf ``i`` of the flattened result is key
``out{i}``. A leaf whose element type numpy cannot store is widened exactly,
bf16 / f8* / f4e2m1fn to float32, s2 / s4 to int8, u2 / u4 to uint8, and key
``out{i}.hlo_type`` holds its HLO type name as a 0-d string array
(``np.array("bf16")``). Every other leaf is stored as it is, with no
``hlo_type`` key. ``load_outputs`` gives back the original arrays.

Inputs (``load_inputs``): key ``arg{i}`` feeds parameter ``i``. Its shape must
be the parameter's. When its dtype differs from the parameter's it is
converted if, and only if, the conversion is exact for every element: a
float32 array holding bf16 values feeds a bf16 parameter, an int8 array
holding values in [-8, 7] feeds an s4 one; a value that would change (a
float32 that is no bf16, 9 for s4, 1.5 for s32, inf for f8e4m3fn) is refused
with an error naming the argument, the parameter, the dtype and the first
such value. An ``arg{i}.hlo_type`` key, as ``save_inputs`` writes it, must
name the parameter's type.
"""

from __future__ import annotations

import os
import re
import warnings
import zipfile
from collections.abc import Sequence

import numpy as np

from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloInputError
from heron.hlo.shapes import ArrayShape, Shape

#: Element types an .npz cannot hold, and the numpy dtype each is stored as.
WIDENED_STORAGE: dict[ElementType, np.dtype] = {
    **{t: np.dtype(np.float32) for t in ElementType if t.is_floating and t.bit_width < 16},
    ElementType.BF16: np.dtype(np.float32),
    ElementType.S2: np.dtype(np.int8),
    ElementType.S4: np.dtype(np.int8),
    ElementType.U2: np.dtype(np.uint8),
    ElementType.U4: np.dtype(np.uint8),
}

TYPE_SUFFIX = ".hlo_type"


# -- writing -----------------------------------------------------------------


def _storable(array: np.ndarray, key: str) -> dict[str, np.ndarray]:
    """``{key: array}``, widened plus ``key.hlo_type`` when numpy cannot store the type."""
    try:
        element_type = ElementType.from_numpy(array.dtype)
    except ValueError:
        raise HloInputError(f"{key}: dtype {array.dtype} has no HLO element type") from None
    storage = WIDENED_STORAGE.get(element_type)
    if storage is None:
        return {key: array}
    return {key: array.astype(storage), key + TYPE_SUFFIX: np.array(element_type.value)}


def _write(path: str | os.PathLike, prefix: str, arrays: Sequence[np.ndarray]) -> None:
    contents: dict[str, np.ndarray] = {}
    for i, array in enumerate(arrays):
        if not isinstance(array, np.ndarray):
            raise HloInputError(
                f"{prefix}{i} is a {type(array).__name__}, not an array; only arrays can be saved"
            )
        contents.update(_storable(array, f"{prefix}{i}"))
    # A file object, because np.savez appends ".npz" to a path that lacks it.
    with open(path, "wb") as f:
        np.savez(f, **contents)


def save_outputs(path: str | os.PathLike, leaves: Sequence[np.ndarray]) -> None:
    """Write result leaves as ``out0``, ``out1``, ... (see the module docstring)."""
    _write(path, "out", leaves)


def save_inputs(path: str | os.PathLike, arrays: Sequence[np.ndarray]) -> None:
    """Write arguments as ``arg0``, ``arg1``, ... in the same convention as outputs."""
    _write(path, "arg", arrays)


# -- reading -----------------------------------------------------------------


def _open(path: str | os.PathLike, what: str) -> dict[str, np.ndarray]:
    try:
        data = np.load(path, allow_pickle=False)
    except OSError as exc:
        raise HloInputError(f"cannot read {what} file {path}: {exc}") from exc
    except (ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise HloInputError(f"{what} file {path} is not a readable .npz archive: {exc}") from exc
    if not hasattr(data, "files"):
        raise HloInputError(f"{what} file {path} holds one array (.npy), not an .npz archive")
    with data:
        try:
            return {name: data[name] for name in data.files}
        except (ValueError, OSError, zipfile.BadZipFile) as exc:
            raise HloInputError(f"{what} file {path}: cannot read its arrays: {exc}") from exc


def _hlo_type(contents: dict[str, np.ndarray], key: str, path: object) -> ElementType | None:
    raw = contents.get(key + TYPE_SUFFIX)
    if raw is None:
        return None
    if raw.shape != () or raw.dtype.kind != "U":
        raise HloInputError(f"{path}: {key}{TYPE_SUFFIX} must be a 0-d string array")
    try:
        return ElementType.parse(str(raw))
    except ValueError as exc:
        raise HloInputError(f"{path}: {key}{TYPE_SUFFIX}: {exc}") from None


def _check_keys(contents: dict[str, np.ndarray], prefix: str, count: int | None, path) -> int:
    """Validate key names; return how many ``prefix{i}`` arrays there are."""
    pattern = re.compile(rf"{prefix}(0|[1-9][0-9]*)({re.escape(TYPE_SUFFIX)})?\Z")
    indices = set()
    for name in contents:
        match = pattern.match(name)
        if match is None:
            raise HloInputError(
                f"{path}: unexpected array '{name}' (expected keys {prefix}0, {prefix}1, ...)"
            )
        if match.group(2) is None:
            indices.add(int(match.group(1)))
        elif name[: -len(TYPE_SUFFIX)] not in contents:
            raise HloInputError(f"{path}: '{name}' has no array '{name[: -len(TYPE_SUFFIX)]}'")
    n = len(indices) if count is None else count
    extra = sorted(i for i in indices if i >= n)
    if extra:
        names = ", ".join(f"{prefix}{i}" for i in extra)
        if count is None:
            raise HloInputError(f"{path}: keys are not consecutive from {prefix}0: {names}")
        raise HloInputError(
            f"{path}: arrays {names} match no parameter (the computation takes {count})"
        )
    return n


def load_outputs(path: str | os.PathLike) -> list[np.ndarray]:
    """Read back what ``save_outputs`` wrote, with the original element types."""
    contents = _open(path, "outputs")
    count = _check_keys(contents, "out", None, path)
    result = []
    for i in range(count):
        key = f"out{i}"
        array = contents[key]
        element_type = _hlo_type(contents, key, path)
        if element_type is not None:
            array = _convert_exactly(array, element_type, f"{path}: {key}")
        result.append(array)
    return result


def _first_difference(original: np.ndarray, back: np.ndarray) -> tuple[int, ...] | None:
    same = back == original
    if original.dtype.kind in "fc":
        same |= np.isnan(original) & np.isnan(back)
    if bool(np.all(same)):
        return None
    return tuple(int(i) for i in np.argwhere(~same)[0])


def _convert_exactly(array: np.ndarray, to: ElementType, label: str) -> np.ndarray:
    """``array`` as ``to``'s dtype, or HloInputError naming the first value that would change."""
    target = to.numpy_dtype
    if array.dtype == target:
        return array
    if array.dtype.kind not in "biufc":
        raise HloInputError(
            f"{label}: dtype {array.dtype} cannot be converted to {to}"
            + (
                " (numpy stores ml_dtypes arrays such as bf16 as raw bytes; store the values"
                " widened instead, e.g. as float32)"
                if array.dtype.kind == "V"
                else ""
            )
        )
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = array.astype(target)
        back = converted.astype(array.dtype)
    where = _first_difference(array, back)
    if where is not None:
        at = f" at index {where}" if where else ""
        raise HloInputError(
            f"{label}: {array.dtype} value {str(array[where])}{at} is not exactly"
            f" representable as {to} (it would become {str(converted[where])});"
            f" give values of type {to}"
        )
    return converted


def load_inputs(
    path: str | os.PathLike,
    shapes: Sequence[Shape],
    names: Sequence[str] | None = None,
) -> list[np.ndarray]:
    """The arguments for parameters of ``shapes`` (in parameter order) from an .npz file.

    ``names`` are the parameters' names, for error messages. See the module
    docstring for the conversion rule.
    """
    contents = _open(path, "inputs")
    _check_keys(contents, "arg", len(shapes), path)
    arguments = []
    for i, shape in enumerate(shapes):
        key = f"arg{i}"
        named = f" '{names[i]}'" if names is not None else ""
        label = f"{key} (parameter {i}{named}, {shape})"
        if not isinstance(shape, ArrayShape) or shape.is_token:
            raise HloInputError(
                f"{label}: .npz inputs can only feed array parameters, not tuples or tokens"
            )
        if key not in contents:
            present = ", ".join(sorted(k for k in contents if TYPE_SUFFIX not in k)) or "none"
            raise HloInputError(f"{path}: no array '{key}' for {label} (arrays present: {present})")
        array = contents[key]
        declared = _hlo_type(contents, key, path)
        if declared is not None and declared is not shape.element_type:
            raise HloInputError(
                f"{path}: {label}: {key}{TYPE_SUFFIX} says {declared},"
                f" the parameter is {shape.element_type}"
            )
        if array.shape != shape.dims:
            raise HloInputError(
                f"{path}: {label}: array has shape {tuple(array.shape)}, expected {shape.dims}"
            )
        arguments.append(
            np.asarray(_convert_exactly(array, shape.element_type, f"{path}: {label}"), order="C")
        )
    return arguments
