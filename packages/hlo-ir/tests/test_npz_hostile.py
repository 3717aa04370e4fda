"""heron.hlo.npz_io on hostile archives: every one refused with an HloInputError, early.

Issue 13's findings, each with a minimal reproducer built here with zipfile (no big
files are committed): a header declaring 10^12 elements, a deflate bomb, a member
without the NPY magic, an encrypted member, an unknown compression method, a pickle.
"""

from __future__ import annotations

import io
import struct
import time
import zipfile

import numpy as np
import pytest
from numpy.lib import format as npy

from heron.hlo import memory_budget
from heron.hlo.errors import HloInputError
from heron.hlo.memory_budget import MemoryBudgetError
from heron.hlo.npz_io import load_inputs, load_outputs
from heron.hlo.shapes import array_shape

F32_4 = [array_shape("f32", (4,))]


def npy_header(shape: tuple[int, ...], dtype=np.float32) -> bytes:
    buffer = io.BytesIO()
    npy.write_array_header_1_0(
        buffer,
        {"descr": npy.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape},
    )
    return buffer.getvalue()


def write_zip(path, members: dict[str, bytes], method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def patch_method(path, method: int) -> None:
    """Set every member's compression method (local headers and central directory) to ``method``."""
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        start = data.find(signature)
        while start >= 0:
            data[start + offset : start + offset + 2] = struct.pack("<H", method)
            start = data.find(signature, start + 4)
    path.write_bytes(bytes(data))


def patch_encrypted(path) -> None:
    """Set the 'encrypted' flag bit of every member."""
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = data.find(signature)
        while start >= 0:
            (flags,) = struct.unpack_from("<H", data, start + offset)
            struct.pack_into("<H", data, start + offset, flags | 1)
            start = data.find(signature, start + 4)
    path.write_bytes(bytes(data))


@pytest.fixture(autouse=True)
def no_budget_override():
    yield
    memory_budget.set_budget(None)


def test_a_header_declaring_10_to_the_12_elements_is_refused_without_reading(tmp_path):
    path = write_zip(tmp_path / "huge.npz", {"arg0.npy": npy_header((10**12,))})
    with pytest.raises(
        HloInputError, match=r"arg0 .*has shape \(1000000000000,\), expected \(4,\)"
    ):
        load_inputs(path, F32_4)
    # A parameter that big: the budget refuses it, still from the header alone.
    memory_budget.set_budget(2**30)
    with pytest.raises(MemoryBudgetError, match=r"would need 3.64 TiB.*memory budget of 1.00 GiB"):
        load_inputs(path, [array_shape("f32", (10**12,))])


def test_a_deflate_bomb_is_refused_before_it_is_inflated(tmp_path):
    # 64 MiB of zeros behind the header of an f32[4]: deflates to ~64 KiB.
    bomb = npy_header((4,)) + bytes(64 * 2**20)
    path = write_zip(tmp_path / "bomb.npz", {"arg0.npy": bomb}, zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 2**20
    start = time.perf_counter()
    with pytest.raises(HloInputError, match=r"member 'arg0.npy': the archive says .* inflates to"):
        load_inputs(path, F32_4)
    assert time.perf_counter() - start < 0.5


def test_a_member_without_the_npy_magic_is_refused(tmp_path):
    path = write_zip(tmp_path / "text.npz", {"arg0.npy": b"hello, not an array"})
    with pytest.raises(HloInputError, match=r"text.npz: member 'arg0.npy' is not an .npy array"):
        load_inputs(path, F32_4)
    with pytest.raises(HloInputError, match="is not an .npy array"):
        load_outputs(path)


def test_an_encrypted_member_is_refused(tmp_path):
    path = write_zip(tmp_path / "secret.npz", {"arg0.npy": npy_header((4,)) + bytes(16)})
    patch_encrypted(path)
    with pytest.raises(HloInputError, match=r"secret.npz: member 'arg0.npy' is encrypted"):
        load_inputs(path, F32_4)


@pytest.mark.parametrize("method", [9, 99])  # deflate64, AES: zipfile reads neither
def test_an_unknown_compression_method_is_refused(tmp_path, method):
    path = write_zip(tmp_path / "odd.npz", {"arg0.npy": npy_header((4,)) + bytes(16)})
    patch_method(path, method)
    with pytest.raises(HloInputError, match=rf"'arg0.npy' uses compression method {method}"):
        load_inputs(path, F32_4)


def test_pickles_stay_refused(tmp_path):
    path = tmp_path / "pickle.npz"
    np.savez(path, arg0=np.array([{"a": 1}, None, 3, 4], dtype=object))
    with pytest.raises(HloInputError, match=r"'arg0.npy' holds Python objects \(a pickle\)"):
        load_inputs(path, F32_4)


def test_truncated_data_is_refused(tmp_path):
    path = write_zip(tmp_path / "short.npz", {"arg0.npy": npy_header((4,)) + bytes(8)})
    with pytest.raises(HloInputError, match="inflates to"):
        load_inputs(path, F32_4)


def test_inputs_over_the_memory_budget_are_refused(tmp_path):
    path = tmp_path / "in.npz"
    np.savez(path, arg0=np.zeros(1000, np.float32))
    memory_budget.set_budget(1000)
    with pytest.raises(MemoryBudgetError, match=r"in.npz would need 4000 bytes"):
        load_inputs(path, [array_shape("f32", (1000,))])
    memory_budget.set_budget(None)
    (loaded,) = load_inputs(path, [array_shape("f32", (1000,))])
    assert loaded.shape == (1000,) and not loaded.any()


def test_compressed_and_fortran_order_archives_still_load(tmp_path):
    path = tmp_path / "in.npz"
    x = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.savez_compressed(path, arg0=x)
    (loaded,) = load_inputs(path, [array_shape("f32", (2, 3))])
    assert np.array_equal(loaded, x)


@pytest.mark.parametrize("compressed", [False, True])
def test_mutated_archives_give_input_errors_only(tmp_path, compressed):
    """Deterministic byte mutations of a valid archive: a value or an HloInputError, never else."""
    source = tmp_path / "good.npz"
    (np.savez_compressed if compressed else np.savez)(
        source, arg0=np.arange(4, dtype=np.float32), arg1=np.array(7, np.int32)
    )
    good = source.read_bytes()
    shapes = [array_shape("f32", (4,)), array_shape("s32", ())]
    rng = np.random.default_rng(13)
    memory_budget.set_budget(2**20)
    for case in range(300):
        data = bytearray(good)
        kind = case % 3
        if kind == 0:  # a few bytes changed
            for _ in range(int(rng.integers(1, 4))):
                data[int(rng.integers(len(data)))] = int(rng.integers(256))
        elif kind == 1:  # truncated
            del data[int(rng.integers(len(data))) :]
        else:  # a size or offset field made huge
            at = int(rng.integers(len(data) - 4))
            data[at : at + 4] = b"\xff\xff\xff\x7f"
        try:
            load_inputs(io.BytesIO(bytes(data)), shapes)
        except HloInputError:
            pass
        except Exception as exc:  # pragma: no cover - the failure message
            pytest.fail(f"mutation {case}: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("special", ["/dev/zero", "fifo", "directory"])
def test_special_files_are_refused_without_reading(tmp_path, special):
    import os

    if special == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        path = tmp_path / "in.npz"
        os.mkfifo(path)
    elif special == "directory":
        path = tmp_path
    else:
        path = special
        if not os.path.exists(path):
            pytest.skip(f"no {path} here")
    with pytest.raises(HloInputError, match="is not a regular file"):
        load_inputs(path, F32_4)
