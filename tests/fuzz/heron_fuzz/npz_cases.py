"""Malformed ``.npz`` inputs for ``heron run --inputs``: an archive is untrusted input.

Each damage is built by hand with ``zipfile`` and raw NPY headers (numpy would
refuse to write most of them): truncated archives, no NPY magic, headers whose
dtype or shape disagree with the parameter, headers declaring 10^12 elements,
deflate bombs, pickles, encrypted or unknown-method members, random byte flips.
The contract: exit 2 with one message naming the file (and the member), never
a traceback, never an allocation past the budget.
"""

from __future__ import annotations

import io
import random
import struct
import zipfile
from collections.abc import Callable

import numpy as np

#: The module the inputs feed: a small fusion with two parameters of different types.
NPZ_HLO = """HloModule npz_target

fused {
  p0 = f32[4,8]{1,0} parameter(0)
  p1 = s32[8]{0} parameter(1)
  c = f32[8]{0} convert(p1)
  b = f32[4,8]{1,0} broadcast(c), dimensions={1}
  ROOT r = f32[4,8]{1,0} add(p0, b)
}

ENTRY main {
  p0 = f32[4,8]{1,0} parameter(0)
  p1 = s32[8]{0} parameter(1)
  ROOT f = f32[4,8]{1,0} fusion(p0, p1), kind=kLoop, calls=fused
}
"""


def npy_bytes(
    descr: str = "<f4",
    shape: tuple = (4, 8),
    data: bytes | None = None,
    fortran: bool = False,
    version: tuple[int, int] = (1, 0),
    magic: bytes = b"\x93NUMPY",
    header: str | None = None,
) -> bytes:
    """An NPY file with any header at all (numpy's writer checks what we want to break)."""
    if header is None:
        header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape!r}, }}"
    text = header.encode("latin1")
    pad = 64 - (len(magic) + 2 + 2 + len(text) + 1) % 64
    text += b" " * (pad % 64) + b"\n"
    if data is None:
        count = 1
        for d in shape if isinstance(shape, tuple) else ():
            count *= d if isinstance(d, int) and d > 0 else 1
        data = bytes(4 * min(count, 1 << 16))
    return magic + bytes(version) + struct.pack("<H", len(text)) + text + data


def good_members() -> dict[str, bytes]:
    p0 = np.arange(32, dtype=np.float32).reshape(4, 8)
    p1 = np.arange(8, dtype=np.int32)
    return {
        "arg0.npy": npy_bytes("<f4", (4, 8), p0.tobytes()),
        "arg1.npy": npy_bytes("<i4", (8,), p1.tobytes()),
    }


def archive(members: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


def _patch_headers(data: bytes, offset_in_header: int, value: bytes) -> bytes:
    """Overwrite a field in every local (PK\\3\\4) and central (PK\\1\\2) header."""
    buf = bytearray(data)
    for sig, base in ((b"PK\x03\x04", 0), (b"PK\x01\x02", 2)):
        pos = buf.find(sig)
        while pos >= 0:
            at = pos + base + offset_in_header
            buf[at : at + len(value)] = value
            pos = buf.find(sig, pos + 4)
    return bytes(buf)


def _one(rng: random.Random, member: bytes) -> dict[str, bytes]:
    members = good_members()
    members[rng.choice(list(members))] = member
    return members


Damage = Callable[[random.Random], tuple[bytes, str]]


def valid(rng: random.Random) -> tuple[bytes, str]:
    return archive(good_members(), rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])), "valid"


def truncated(rng: random.Random) -> tuple[bytes, str]:
    data = archive(good_members(), zipfile.ZIP_DEFLATED)
    cut = rng.randrange(len(data))
    return data[:cut], f"truncated at {cut} of {len(data)}"


def no_magic(rng: random.Random) -> tuple[bytes, str]:
    return archive(
        _one(rng, b"not an npy file at all" * rng.randint(0, 4))
    ), "member without NPY magic"


def wrong_dtype(rng: random.Random) -> tuple[bytes, str]:
    descr = rng.choice(
        ["<f8", ">f4", "|b1", "<U10", "|O", "<c8", "|V4", "garbage", "<i8", "|u1", "<f2"]
    )
    return archive(_one(rng, npy_bytes(descr, (4, 8)))), f"header dtype {descr}"


def wrong_shape(rng: random.Random) -> tuple[bytes, str]:
    shape = rng.choice(
        [(4, 9), (), (32,), (8, 4), (-1,), (10**12,), (2**62, 2**62), (0, 8), (4, 8, 1)]
    )
    return archive(_one(rng, npy_bytes("<f4", shape))), f"header shape {shape}"


def short_data(rng: random.Random) -> tuple[bytes, str]:
    n = rng.randrange(0, 128)
    return archive(_one(rng, npy_bytes("<f4", (4, 8), bytes(n)))), f"data of {n} bytes for 128"


def bad_header(rng: random.Random) -> tuple[bytes, str]:
    header = rng.choice(
        [
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': 'x'}",
            "__import__('os').system('true')",
            "{'descr': '<f4', 'fortran_order': 'yes', 'shape': (4, 8)}",
            "[1, 2, 3]",
            "",
            "{" * 200,
        ]
    )
    version = rng.choice([(1, 0), (2, 0), (3, 0), (9, 9)])
    return archive(
        _one(rng, npy_bytes(header=header, version=version))
    ), f"header {header!r} v{version}"


def fortran_order(rng: random.Random) -> tuple[bytes, str]:
    return archive(_one(rng, npy_bytes("<f4", (4, 8), bytes(128), fortran=True))), "fortran_order"


def deflate_bomb(rng: random.Random) -> tuple[bytes, str]:
    size = rng.choice([1 << 20, 64 << 20])
    shape = rng.choice([(4, 8), (size // 4,)])
    member = npy_bytes("<f4", shape, bytes(size))
    return archive(
        _one(rng, member), zipfile.ZIP_DEFLATED
    ), f"deflate bomb {size} bytes, shape {shape}"


def pickle_member(rng: random.Random) -> tuple[bytes, str]:
    out = io.BytesIO()
    np.save(out, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    return archive(_one(rng, out.getvalue())), "object array (pickle)"


def members_wrong(rng: random.Random) -> tuple[bytes, str]:
    members = good_members()
    choice = rng.randrange(4)
    if choice == 0:
        del members["arg1.npy"]
        return archive(members), "missing arg1"
    if choice == 1:
        members["arg2.npy"] = members["arg0.npy"]
        return archive(members), "extra arg2"
    if choice == 2:
        names = {"x.npy": members["arg0.npy"], "../arg1.npy": members["arg1.npy"]}
        return archive(names), "misnamed members (one with ../)"
    return archive({}), "empty archive"


def encrypted(rng: random.Random) -> tuple[bytes, str]:
    # general purpose flag: offset 6 in a local header, 8 in a central one (base +2).
    return _patch_headers(archive(good_members()), 6, b"\x01\x00"), "encrypted flag"


def unknown_method(rng: random.Random) -> tuple[bytes, str]:
    method = rng.choice([99, 1, 6, 98, 93, 95])
    return _patch_headers(archive(good_members()), 8, struct.pack("<H", method)), f"method {method}"


def byte_flips(rng: random.Random) -> tuple[bytes, str]:
    buf = bytearray(archive(good_members(), rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])))
    spots = [rng.randrange(len(buf)) for _ in range(rng.randint(1, 6))]
    for at in spots:
        buf[at] = rng.randrange(256)
    return bytes(buf), f"bytes changed at {spots}"


def not_an_archive(rng: random.Random) -> tuple[bytes, str]:
    data = rng.choice([b"", b"PK", b"hello\n", npy_bytes(), b"PK\x05\x06" + bytes(18)])
    return data, f"not an archive ({len(data)} bytes)"


DAMAGES: dict[str, Damage] = {
    f.__name__: f
    for f in (
        valid,
        truncated,
        no_magic,
        wrong_dtype,
        wrong_shape,
        short_data,
        bad_header,
        fortran_order,
        deflate_bomb,
        pickle_member,
        members_wrong,
        encrypted,
        unknown_method,
        byte_flips,
        not_an_archive,
    )
}


def damaged_npz(rng: random.Random) -> tuple[bytes, str]:
    """One damaged archive and what was done to it."""
    name = rng.choice(list(DAMAGES))
    data, what = DAMAGES[name](rng)
    return data, f"{name}: {what}"
