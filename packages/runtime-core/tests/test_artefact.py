"""Executable artefacts: the round trip, and every refusal of a damaged or foreign file."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import stat
import struct
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from heron.runtime.core import artefact as artefact_module
from heron.runtime.core.artefact import (
    FORMAT_VERSION,
    MAGIC,
    MAGIC_MEMBER,
    MANIFEST,
    Allocation,
    Artefact,
    ArtefactError,
    EntrySignature,
    KernelEntry,
    Limits,
    load,
    member_names,
)
from heron.runtime.core.device import KernelImage
from heron.runtime.core.thunks import (
    BufferSlice,
    CommandBufferThunk,
    ConditionalThunk,
    CopyThunk,
    KernelThunk,
    LibraryCallThunk,
    MemsetThunk,
    SequentialThunk,
    WhileThunk,
)
from heron.target import Target

S = BufferSlice


def make_artefact(constant: bytes = bytes(range(16)), **changes) -> Artefact:
    add = KernelThunk(
        "add_f32", "fusion.1", [S(0, 0, 16), S(1, 0, 16), S(3, 0, 16)], (1, 1, 1), (4, 1, 1)
    )
    step = KernelThunk("step", "fusion.2", [S(3, 0, 16), S(2, 0, 1)], (1, 1, 1), (1, 1, 1))
    fields = dict(
        target=Target.preset("h100"),
        program=[
            MemsetThunk(S(4, 0, 4), 0, 4),
            WhileThunk([step], S(2, 0, 1), [CommandBufferThunk([add])], trip_count=None),
            ConditionalThunk(S(4, 0, 4), "s32", [[CopyThunk(S(0, 0, 16), S(3, 0, 16))], [add]]),
            SequentialThunk([LibraryCallThunk("blas", "gemm", [S(0, 0, 16)], {"m": 2})]),
        ],
        allocations=[
            Allocation(0, 16, "parameter", parameter=0),
            Allocation(1, len(constant), "constant"),
            Allocation(2, 1, "temp"),
            Allocation(3, 16, "output", output=0),
            Allocation(4, 4, "temp"),
        ],
        signature=EntrySignature(["f32[4]{0}"], ["f32[4]{0}"]),
        kernels=[
            KernelEntry(
                "cuda", "fusion.1", KernelImage("ptx", "add_f32", b".visible .entry add_f32")
            ),
            KernelEntry("cuda", "fusion.2", KernelImage("cubin", "step", b"\x7fELF\x00cubin")),
            KernelEntry(
                "interpreter", "fusion.1", KernelImage("heron-interpreter", "add_f32", b'{"p": 1}')
            ),
            KernelEntry(
                "interpreter", "fusion.2", KernelImage("heron-interpreter", "step", b'{"p": 2}')
            ),
        ],
        constants={1: constant},
        optimized_hlo="HloModule m\n",
        created_by="heron compile test",
    )
    fields.update(changes)
    return Artefact(**fields)


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.heron"
    make_artefact().save(path)
    return path


def raw_members(path: Path) -> list[tuple[str, bytes]]:
    """The archive's members as stored, with no verification (to tamper with)."""
    with zipfile.ZipFile(path) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def manifest_for(members: list[tuple[str, bytes]], version: int = FORMAT_VERSION) -> bytes:
    listing = [
        {"name": n, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
        for n, d in members
        if n not in (MAGIC_MEMBER, MANIFEST)
    ]
    manifest = json.loads(dict(members)[MANIFEST]) if MANIFEST in dict(members) else {}
    manifest.update(format_version=version, members=listing)
    return json.dumps(manifest).encode()


def write_zip(path: Path, members: list[tuple[str, bytes]], **info_fields) -> Path:
    """A zip of ``members`` (names as given, duplicates and all); the magic stored."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = (
                zipfile.ZIP_STORED if name == MAGIC_MEMBER else zipfile.ZIP_DEFLATED
            )
            for field, value in info_fields.get(name, {}).items():
                setattr(info, field, value)
            archive.writestr(info, data)
    return path


def rewrite(
    good: Path,
    edit: Callable[[list[tuple[str, bytes]]], list[tuple[str, bytes]]],
    remanifest: bool = False,
) -> Path:
    members = edit(raw_members(good))
    if remanifest:
        members = [(n, manifest_for(members) if n == MANIFEST else d) for n, d in members]
    return write_zip(good.with_name("tampered.heron"), members)


def refused(path: Path, pattern: str, limits: Limits | None = None) -> str:
    with pytest.raises(ArtefactError, match=pattern) as info:
        load(path, limits)
    message = str(info.value)
    assert "\n" not in message
    return message


# -- the round trip --------------------------------------------------------------------


def test_an_artefact_round_trips_and_is_byte_reproducible(tmp_path: Path) -> None:
    original = make_artefact()
    original.save(tmp_path / "a.heron")
    original.save(tmp_path / "b.heron")
    assert (tmp_path / "a.heron").read_bytes() == (tmp_path / "b.heron").read_bytes()
    again = Artefact.load(tmp_path / "a.heron")
    assert again == original
    assert again.kernel_image("interpreter", "fusion.2").data == b'{"p": 2}'
    assert again.backends == ("cuda", "interpreter")
    names = [info.filename for info in zipfile.ZipFile(tmp_path / "a.heron").infolist()]
    assert names == list(member_names(original))
    assert names[:2] == [MAGIC_MEMBER, MANIFEST]
    manifest = json.loads(zipfile.ZipFile(tmp_path / "a.heron").read(MANIFEST))
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["target"] == Target.preset("h100").to_json()  # every field
    assert manifest["target"]["compute_capability"] == [9, 0]
    assert {m["name"] for m in manifest["members"]} == set(names[2:])


def test_without_optional_members(tmp_path: Path) -> None:
    plain = make_artefact(optimized_hlo=None)
    plain.save(tmp_path / "a.heron")
    assert load(tmp_path / "a.heron") == plain
    assert "optimized.hlo" not in member_names(plain)


def test_loading_never_unpickles(good: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    assert load(good) == make_artefact()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"constants": {}}, r"constant allocation 1 has no bytes"),
        ({"constants": {1: b"x"}}, r"constants/1.bin: 1 bytes for a constant allocation of 16"),
        ({"signature": EntrySignature([], ["f32[4]"])}, r"parameter 0, but the entry has 0"),
    ],
)
def test_inconsistent_artefacts_cannot_be_built(changes: dict, message: str) -> None:
    with pytest.raises(ArtefactError, match=message):
        make_artefact(**changes)


def test_a_backend_missing_one_kernel_image_is_refused() -> None:
    kernels = make_artefact().kernels[:-1]
    with pytest.raises(
        ArtefactError, match=r"needs image 'fusion.2', which backend 'interpreter' lacks"
    ):
        make_artefact(kernels=kernels)


def test_an_image_whose_kernel_is_not_the_thunks_is_refused() -> None:
    kernels = list(make_artefact().kernels)
    kernels[0] = KernelEntry("cuda", "fusion.1", KernelImage("ptx", "other", b""))
    with pytest.raises(ArtefactError, match=r"whose kernel is 'other'"):
        make_artefact(kernels=kernels)


def test_bad_signature_shape_is_refused() -> None:
    with pytest.raises(
        ArtefactError, match=r"signature parameters\[0\] 'f32\[4' is not an HLO shape"
    ):
        EntrySignature(["f32[4"], [])


# -- tampering -------------------------------------------------------------------------


ALL_MEMBERS = list(member_names(make_artefact()))


@pytest.mark.parametrize("member", ALL_MEMBERS)
def test_a_flipped_byte_in_any_member_is_refused(good: Path, member: str) -> None:
    def flip(members):
        out = []
        for name, data in members:
            if name == member:
                if name == MANIFEST:  # flip a digit of the first listed sha256
                    at = data.index(b'"sha256"') + len(b'"sha256": "')
                    data = (
                        data[:at] + (b"1" if data[at : at + 1] != b"1" else b"2") + data[at + 1 :]
                    )
                else:
                    data = bytes([data[0] ^ 0x01]) + data[1:]
            out.append((name, data))
        return out

    expected = {
        MAGIC_MEMBER: r"member 'heron-executable' is not heron's magic",
        MANIFEST: r"member 'program.json': sha256 differs from the manifest's",
    }.get(
        member, rf"member '{member}': sha256 differs from the manifest's \(the member was altered\)"
    )
    refused(rewrite(good, flip), expected)


@pytest.mark.parametrize("member", ALL_MEMBERS)
def test_a_flipped_byte_in_the_file_within_any_member_is_refused(good: Path, member: str) -> None:
    data = bytearray(good.read_bytes())
    info = zipfile.ZipFile(good).getinfo(member)
    name_length, extra_length = struct.unpack(
        "<HH", data[info.header_offset + 26 : info.header_offset + 30]
    )
    start = info.header_offset + 30 + name_length + extra_length
    data[start + info.compress_size // 2] ^= 0x10
    good.write_bytes(bytes(data))
    refused(good, rf"member '{re.escape(member)}' (is damaged and cannot be read|: sha256 differs)")


@pytest.mark.parametrize("keep", [0.99, 0.5, 0.1, 30, 5])
def test_a_truncated_file_is_refused(good: Path, keep: float) -> None:
    data = good.read_bytes()
    length = int(len(data) * keep) if isinstance(keep, float) else keep
    good.write_bytes(data[:length])
    refused(good, r"not a readable zip archive \(truncated or damaged\)")


def test_a_newer_format_version_is_refused_naming_both(good: Path) -> None:
    def newer(members):
        return [
            (n, manifest_for(members, FORMAT_VERSION + 1) if n == MANIFEST else d)
            for n, d in members
        ]

    message = refused(
        rewrite(good, newer), rf"format version {FORMAT_VERSION + 1}, newer than this heron"
    )
    assert f"reads (version {FORMAT_VERSION})" in message


@pytest.mark.parametrize(
    ("version", "pattern"),
    [
        (0, r"format version 0 is not one this heron reads"),
        ("1", r"format_version is '1', not an integer"),
        (True, "not an integer"),
    ],
)
def test_a_wrong_format_version_is_refused(good: Path, version, pattern: str) -> None:
    def wrong(members):
        manifest = json.loads(dict(members)[MANIFEST])
        manifest["format_version"] = version
        return [(n, json.dumps(manifest).encode() if n == MANIFEST else d) for n, d in members]

    refused(rewrite(good, wrong), pattern)


def test_a_manifest_with_control_characters_in_its_text_is_refused(good: Path) -> None:
    def escape(members):
        manifest = json.loads(dict(members)[MANIFEST])
        manifest["created_by"] = "heron\x1b[2J"
        return [(n, json.dumps(manifest).encode() if n == MANIFEST else d) for n, d in members]

    refused(rewrite(good, escape), r"created_by is not one printable line")


@pytest.mark.parametrize(
    ("outside", "problem"),
    [
        ("../outside.bin", r"a '\.\.' component \(outside the archive\)"),
        ("kernels/../../etc/passwd", r"a '\.\.' component"),
        ("/etc/passwd", "an absolute path"),
        ("C:/windows/x", "an absolute path"),
        ("kernels\\cuda\\x.ptx", "a backslash"),
    ],
)
def test_a_manifest_pointing_outside_the_archive_is_refused(
    good: Path, outside: str, problem: str
) -> None:
    def point_outside(members):
        manifest = json.loads(dict(members)[MANIFEST])
        manifest["members"][0]["name"] = outside
        return [(n, json.dumps(manifest).encode() if n == MANIFEST else d) for n, d in members]

    refused(
        rewrite(good, point_outside),
        rf"member 'manifest.json' names .*, which is refused: it has {problem}",
    )


@pytest.mark.parametrize(
    ("outside", "problem"),
    [
        ("../evil.sh", r"a '\.\.' component \(outside the archive\)"),
        ("/tmp/evil", "an absolute path"),
        ("a//b", "characters or components"),
    ],
)
def test_an_archive_member_named_outside_is_refused(good: Path, outside: str, problem: str) -> None:
    path = rewrite(good, lambda members: [*members, (outside, b"#!/bin/sh\n")], remanifest=False)
    refused(path, rf"member '{outside}' is refused: its name has {problem}")


def test_a_member_missing_from_the_manifest_is_refused(good: Path) -> None:
    path = rewrite(good, lambda members: [*members, ("extra.bin", b"x")])
    refused(path, r"member 'extra.bin' is in the archive but not in the manifest")


def test_a_manifest_naming_a_missing_member_is_refused(good: Path) -> None:
    path = rewrite(good, lambda members: [(n, d) for n, d in members if n != "constants/1.bin"])
    refused(path, r"member 'constants/1.bin' is in the manifest but not in the archive")


def test_a_listed_member_outside_the_layout_is_refused(good: Path) -> None:
    path = rewrite(good, lambda members: [*members, ("notes.txt", b"hi")], remanifest=True)
    refused(path, r"member 'notes.txt' is no part of an artefact's layout")


def test_kernels_table_naming_a_missing_image_is_refused(good: Path) -> None:
    path = rewrite(
        good,
        lambda ms: [(n, d) for n, d in ms if n != "kernels/cuda/fusion.2.cubin"],
        remanifest=True,
    )
    refused(path, r"member 'kernels/cuda/fusion.2.cubin' \(named by 'kernels.json'\) is missing")


def test_a_member_larger_than_the_manifest_says_is_refused(good: Path) -> None:
    def grow(members):
        manifest = manifest_for(members)
        return [
            (n, manifest if n == MANIFEST else d + b"\0" if n == "constants/1.bin" else d)
            for n, d in members
        ]

    refused(
        rewrite(good, grow),
        r"member 'constants/1.bin' is 17 bytes in the archive, the manifest says 16",
    )


def test_a_zip_directory_lying_about_a_member_size_is_refused(good: Path) -> None:
    """The directory (and the manifest) claim 32 bytes; the stored data has 16."""
    members = raw_members(good)
    listing = json.loads(dict(members)[MANIFEST])
    for entry in listing["members"]:
        if entry["name"] == "constants/1.bin":
            entry["size"] = 32
    members = [(n, json.dumps(listing).encode() if n == MANIFEST else d) for n, d in members]
    path = write_zip(
        good.with_name("lying.heron"),
        members,
        **{"constants/1.bin": {"compress_type": zipfile.ZIP_STORED}},
    )
    data = bytearray(path.read_bytes())
    entry = data.rindex(b"constants/1.bin") - 46  # the name ends the fixed central header
    assert data[entry : entry + 4] == b"PK\x01\x02"
    assert struct.unpack_from("<I", data, entry + 24) == (16,)
    struct.pack_into("<I", data, entry + 24, 32)  # the central directory's uncompressed size
    path.write_bytes(bytes(data))
    refused(path, r"member 'constants/1.bin' holds 16 bytes where 32 were declared")


def test_an_oversized_member_is_refused_before_decompression(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bomb.heron"
    big = bytes(8 << 20)  # 8 MiB of zeros: a few KiB deflated
    artefact = make_artefact(constant=big)
    artefact.save(path)
    assert path.stat().st_size < 64 << 10
    opened: list[str] = []
    real_open = zipfile.ZipFile.open

    def spy(self, name, *args, **kwargs):
        opened.append(getattr(name, "filename", name))
        return real_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    refused(
        path,
        r"member 'constants/1.bin' declares 8388608 bytes, over the limit of 1048576",
        Limits(max_member_bytes=1 << 20),
    )
    assert opened == []  # refused from the directory alone: nothing was decompressed
    refused(
        path,
        r"member '.*' takes the archive over the limit of 4194304 bytes in all",
        Limits(max_total_bytes=4 << 20),
    )
    assert opened == []
    assert load(path) == artefact  # the default limits take it


def test_a_manifest_over_the_json_limit_is_refused(good: Path) -> None:
    refused(
        good,
        r"member 'manifest.json' declares \d+ bytes, over the limit of 100",
        Limits(max_json_bytes=100),
    )


def test_duplicate_member_names_are_refused(good: Path) -> None:
    with pytest.warns(UserWarning, match="Duplicate name"):
        path = rewrite(good, lambda members: [*members, ("program.json", b"{}")])
    refused(path, r"member 'program.json' appears more than once in the archive")


def test_symlinks_directories_and_other_compression_are_refused(good: Path) -> None:
    members = raw_members(good)
    link = write_zip(
        good.with_name("link.heron"),
        [*members, ("evil", b"/etc/passwd")],
        evil={"external_attr": (stat.S_IFLNK | 0o777) << 16},
    )
    refused(link, r"member 'evil' is a symbolic link")
    directory = write_zip(good.with_name("dir.heron"), [*members, ("kernels/", b"")])
    refused(
        directory,
        r"member 'kernels/' is refused: its name has a trailing '/' \(a directory entry\)",
    )
    bz = write_zip(
        good.with_name("bz.heron"),
        members,
        **{"program.json": {"compress_type": zipfile.ZIP_BZIP2}},
    )
    refused(bz, r"member 'program.json' uses compression method 12 \(only stored and deflated")


@pytest.mark.parametrize(
    ("contents", "pattern"),
    [
        (b"", r"the file is empty, not an artefact"),
        (
            b"\x89PNG\r\n\x1a\n" + bytes(64),
            r"not a heron executable artefact \(it starts with 89 50 4e 47, not a zip header\)",
        ),
        (b"GIF89a", r"starts with 47 49 46 38"),
        (b"PK\x03\x04garbage", r"not a readable zip archive"),
    ],
)
def test_foreign_files_are_refused(tmp_path: Path, contents: bytes, pattern: str) -> None:
    path = tmp_path / "foreign.heron"
    path.write_bytes(contents)
    refused(path, pattern)


def test_a_directory_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    refused(tmp_path, r"is a directory, not an artefact file")
    refused(tmp_path / "nothing.heron", r"no such file")


def test_a_zip_that_is_not_an_artefact_is_refused(tmp_path: Path, good: Path) -> None:
    plain = write_zip(tmp_path / "plain.zip", [("readme.txt", b"hello")])
    refused(plain, r"the first member is not 'heron-executable'")
    members = raw_members(good)
    no_magic = write_zip(tmp_path / "late.heron", [members[1], members[0], *members[2:]])
    refused(no_magic, r"the first member is not 'heron-executable'")
    wrong_magic = write_zip(tmp_path / "wrong.heron", [(MAGIC_MEMBER, MAGIC.upper()), *members[1:]])
    refused(wrong_magic, r"member 'heron-executable' is not heron's magic")
    prefixed = tmp_path / "prefixed.heron"
    prefixed.write_bytes(b"PK\x03\x04" + good.read_bytes())  # a zip header, then the artefact
    refused(prefixed, r"first member is not|not a readable zip")


@pytest.mark.parametrize(
    ("member", "data", "pattern"),
    [
        (
            "program.json",
            b'{"thunks": [NaN]}',
            r"member 'program.json' is not valid JSON: NaN is not JSON",
        ),
        (
            "program.json",
            b'{"thunks": [], "thunks": []}',
            r"is not valid JSON: repeated key 'thunks'",
        ),
        ("program.json", b"\x80\x03pickle", r"member 'program.json' is not valid JSON"),
        (
            "program.json",
            b"[" * 100_000 + b"]" * 100_000,
            r"member 'program.json' is not valid JSON",
        ),
        (
            "program.json",
            b'{"thunks": [{"kind": "exec"}]}',
            r"member 'program.json': program.thunks\[0\]: unknown thunk kind 'exec'",
        ),
        (
            "program.json",
            b'{"thunks": [{"kind": "memset", "destination": [9, 0, 4], "value": 0, "width": 1}]}',
            r"program.json: memset thunk: slice alloc9\[0:4\] names allocation 9, but there are 5",
        ),
        (
            "allocations.json",
            b'[{"index": 0}]',
            r"member 'allocations.json': entry 0 does not have exactly",
        ),
        (
            "signature.json",
            b'{"parameters": ["f32[x]"], "results": []}',
            r"signature parameters\[0\] 'f32\[x\]' is not an HLO shape",
        ),
        (
            "kernels.json",
            b'[{"backend": "cuda", "key": "../x", "format": "ptx", "kernel_name": "k"}]',
            r"a kernel key must be a name",
        ),
        ("optimized.hlo", b"\xff\xfe", r"member 'optimized.hlo' is not UTF-8 text"),
    ],
)
def test_malformed_tables_are_refused_naming_the_member(
    good: Path, member: str, data: bytes, pattern: str
) -> None:
    path = rewrite(
        good, lambda ms: [(n, data if n == member else d) for n, d in ms], remanifest=True
    )
    refused(path, pattern)


# -- heron-run -------------------------------------------------------------------------


def heron_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "heron.runtime.core.heron_run", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_heron_run_describes_a_good_artefact_and_refuses_a_tampered_one(good: Path) -> None:
    described = heron_run(str(good), "--describe")
    assert described.returncode == 0, described.stderr
    assert f"format version {FORMAT_VERSION}" in described.stdout
    assert "target: h100 (cuda, sm_90, warps of 32)" in described.stdout
    assert "entry: (f32[4]{0}) -> (f32[4]{0})" in described.stdout
    digest = hashlib.sha256(zipfile.ZipFile(good).read("constants/1.bin")).hexdigest()
    assert "constants/1.bin" in described.stdout and digest in described.stdout
    # every member counted is listed (issue 31: it said 8 and listed 6)
    lines = described.stdout.splitlines()
    (header,) = [k for k, line in enumerate(lines) if line.startswith("  members (")]
    listed = [line.split()[0] for line in lines[header + 1 :]]
    assert lines[header] == f"  members ({len(listed)}):"
    assert sorted(listed) == sorted(zipfile.ZipFile(good).namelist())
    # and the file is readable like any output (mkstemp's 0600 widened by the umask)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(good.stat().st_mode) == 0o666 & ~umask

    data = bytearray(good.read_bytes())
    data[len(data) // 3] ^= 0xFF
    tampered = good.with_name("tampered.heron")
    tampered.write_bytes(bytes(data))
    result = heron_run(str(tampered), "--describe")
    assert result.returncode == 2
    assert result.stderr.startswith("heron-run: refused: ") and result.stdout == ""

    running = heron_run(str(good), "--inputs", "absent.npz")
    assert running.returncode == 2
    assert "--inputs absent.npz: no such file" in running.stderr
    assert "--no-command-buffers" in heron_run("--help").stdout


def test_heron_run_is_a_console_script_of_runtime_core() -> None:
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    assert scripts["heron-run"] == "heron.runtime.core.heron_run:main"
    assert artefact_module.load is load


def test_the_whole_target_is_kept_and_checked(tmp_path) -> None:
    path = tmp_path / "rocm.heron"
    make_artefact(target=Target.preset("mi300x")).save(path)
    assert load(path).target == Target.preset("mi300x")  # every field, warps of 64 too
    manifest = json.loads(zipfile.ZipFile(path).read(MANIFEST))
    assert manifest["target"]["warp_size"] == 64 and manifest["format_version"] == FORMAT_VERSION


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"warp_size": 48}, "target: .*warp_size"),
        ({"tensor_cores": 4}, "target: unknown target fields tensor_cores"),
        ({"name": "h100 /etc"}, "target name must be a name"),
    ],
)
def test_a_manifest_target_that_is_no_target_is_refused(good: Path, change, pattern) -> None:
    def edit(members):
        manifest = json.loads(dict(members)[MANIFEST])
        manifest["target"] |= change
        return [(n, json.dumps(manifest).encode() if n == MANIFEST else d) for n, d in members]

    refused(rewrite(good, edit), pattern)


def _sharing_artefact() -> Artefact:
    """Two CUDA kernels whose images are one cubin (one ptxas made it of both)."""
    cubin = b"\x7fELF\x00cubin of add_f32 and step"
    kernels = [
        KernelEntry("cuda", "fusion.1", KernelImage("cubin", "add_f32", cubin)),
        KernelEntry("cuda", "fusion.2", KernelImage("cubin", "step", cubin)),
        KernelEntry(
            "interpreter", "fusion.1", KernelImage("heron-interpreter", "add_f32", b'{"p": 1}')
        ),
        KernelEntry(
            "interpreter", "fusion.2", KernelImage("heron-interpreter", "step", b'{"p": 2}')
        ),
    ]
    return make_artefact(kernels=kernels)


def test_kernels_sharing_an_image_store_it_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.heron"
    artefact = _sharing_artefact()
    artefact.save(path)
    names = zipfile.ZipFile(path).namelist()
    assert "kernels/cuda/fusion.1.cubin" in names and "kernels/cuda/fusion.2.cubin" not in names
    entries = json.loads(zipfile.ZipFile(path).read("kernels.json"))
    assert entries[1]["member"] == "kernels/cuda/fusion.1.cubin" and "member" not in entries[0]
    loaded = load(path)
    assert loaded.kernel_image("cuda", "fusion.2") == KernelImage(
        "cubin", "step", artefact.kernels[0].image.data
    )
    assert loaded == artefact


@pytest.mark.parametrize(
    ("member", "pattern"),
    [
        ("kernels/interpreter/fusion.1.heron-interpreter", "not one of its backend's cubin"),
        ("kernels/cuda/fusion.9.cubin", r"'kernels/cuda/fusion.9.cubin' .* is missing"),
        ("../escape.cubin", "not one of its backend's cubin"),
    ],
)
def test_a_shared_image_member_must_be_one_of_its_backend_s(tmp_path, member, pattern) -> None:
    good = tmp_path / "shared.heron"
    _sharing_artefact().save(good)

    def point_elsewhere(members):
        table = json.loads(dict(members)["kernels.json"])
        table[1]["member"] = member
        return [(n, _json(table) if n == "kernels.json" else d) for n, d in members]

    refused(rewrite(good, point_elsewhere, remanifest=True), pattern)


def test_a_format_2_artefact_still_loads_but_names_no_shared_member(tmp_path) -> None:
    good = tmp_path / "good.heron"
    make_artefact().save(good)

    def as_version_2(members):
        return [(n, manifest_for(members, 2) if n == MANIFEST else d) for n, d in members]

    assert load(rewrite(good, as_version_2)) == make_artefact()
    shared = tmp_path / "shared.heron"
    _sharing_artefact().save(shared)
    refused(rewrite(shared, as_version_2), r"entry 1 does not have exactly")


def _json(value) -> bytes:
    return json.dumps(value).encode()
