"""heron.target: presets, arch lookup, command-line resolution, device queries."""

import json

import attrs
import pytest

from heron.target import Target, TargetError, default_target, presets, ptx_isa_version

PRESET_NAMES = ["a100", "h100", "h200", "mi250x", "mi300x"]


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_loads_validates_and_names_its_source(name):
    target = Target.preset(name)
    assert target.name == name
    assert "target_config/specs" in target.source
    assert target.description
    # Re-validating the same values must pass: the preset is a valid Target.
    assert attrs.evolve(target) == target


def test_presets_are_ordered_and_a_fresh_dict():
    found = presets()
    assert list(found) == PRESET_NAMES
    found.clear()
    assert list(presets()) == PRESET_NAMES


def test_h100_numbers():
    h100 = Target.preset("h100")
    assert (h100.backend, h100.arch, h100.warp_size) == ("cuda", "sm_90", 32)
    assert h100.core_count == 132
    assert h100.shared_memory_per_block == 49152
    assert h100.shared_memory_per_block_optin == 232448
    assert h100.compute_capability == (9, 0)
    assert h100.isa_version == 81  # sm_90's vector reductions
    assert h100.vector_atomic_add_bytes == 16


def test_rocm_presets():
    mi300x = Target.preset("mi300x")
    assert (mi300x.backend, mi300x.arch, mi300x.warp_size) == ("rocm", "gfx942", 64)
    assert mi300x.core_count == 304
    assert mi300x.compute_capability is None
    assert mi300x.isa_version == 5
    mi250x = Target.preset("mi250x")
    assert (mi250x.arch, mi250x.warp_size, mi250x.core_count) == ("gfx90a", 64, 110)


def test_a100_and_h200():
    a100 = Target.preset("a100")
    assert (a100.arch, a100.core_count, a100.compute_capability) == ("sm_80", 108, (8, 0))
    h200 = Target.preset("H200")  # case-insensitive
    assert h200.arch == "sm_90"
    assert h200.memory_bandwidth > Target.preset("h100").memory_bandwidth


def test_op_cycles_are_the_sm_90_profile_where_one_was_measured():
    """h100 and h200 carry XLA's measured sm_90 op profile (a c128 division 2,280 cycles,
    an f32 one 19); the other presets none (every type costs what f32 does there)."""
    for name in ("h100", "h200"):
        cycles = dict(Target.preset(name).op_cycles)
        assert (cycles["divide.c128"], cycles["divide.f32"], cycles["multiply.f64"]) == (
            2280,
            19,
            15,
        )
        assert list(cycles) == sorted(cycles)
    for name in ("a100", "mi250x", "mi300x"):
        assert Target.preset(name).op_cycles == ()
    h100 = Target.preset("h100")
    assert Target.from_json(json.loads(json.dumps(h100.to_json()))) == h100
    assert attrs.evolve(h100, op_cycles={"add.f64": 15}).op_cycles == (("add.f64", 15),)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"divide": 19}, "key 'divide' is not 'opcode.type'"),
        ({"divide.f32.x": 19}, "key 'divide.f32.x' is not"),
        ({"divide.f32": 0}, "divide.f32 must be a positive integer, got 0"),
        ({"divide.f32": True}, "must be a positive integer, got True"),
        (7, "must be a table of 'opcode.type' = cycles"),
    ],
)
def test_op_cycles_are_checked(value, message):
    with pytest.raises(TargetError, match=message):
        attrs.evolve(Target.preset("h100"), op_cycles=value)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(TargetError, match="unknown target preset 'v100'.*a100, h100"):
        Target.preset("v100")


def test_default_target():
    assert default_target() == Target.preset("h100")
    assert default_target("rocm") == Target.preset("mi300x")
    with pytest.raises(TargetError, match="unknown backend 'metal'"):
        default_target("metal")


def test_summary():
    assert Target.preset("h100").summary() == (
        "h100: cuda sm_90, 132 SMs, warp 32, 48 KiB shared/block (227 KiB opt-in), 3.35 TB/s"
    )
    assert Target.preset("mi300x").summary() == (
        "mi300x: rocm gfx942, 304 CUs, warp 64, 64 KiB shared/block, 6.81 TB/s"
    )


@pytest.mark.parametrize(
    "arch, name",
    [("sm_80", "a100"), ("sm_90", "h100"), ("gfx942", "mi300x"), ("gfx90a", "mi250x")],
)
def test_for_arch_exact(arch, name):
    assert Target.for_arch(arch) == Target.preset(name)


@pytest.mark.parametrize(
    "arch, base, capability, isa",
    [
        ("sm_90a", "h100", (9, 0), 81),
        ("sm_89", "a100", (8, 9), 80),  # same major beats the numerically nearer sm_90
        ("sm_100", "h100", (10, 0), 86),
        ("sm_120", "h100", (12, 0), 87),
        ("gfx908", "mi250x", None, 5),
        ("gfx950", "mi300x", None, 5),
    ],
)
def test_for_arch_closest_preset(arch, base, capability, isa):
    target = Target.for_arch(arch)
    preset = Target.preset(base)
    assert target.name == f"{base}@{arch}"
    assert (target.arch, target.compute_capability, target.isa_version) == (arch, capability, isa)
    assert target.core_count == preset.core_count
    assert target.warp_size == preset.warp_size


@pytest.mark.parametrize("arch", ["sm_x", "gfx", "compute_90", "GFX942", "sm_90b", "", "h100"])
def test_for_arch_refuses_unknown_names(arch):
    with pytest.raises(TargetError, match="unknown GPU arch"):
        Target.for_arch(arch)


@pytest.mark.parametrize(
    "arch, isa",
    [("sm_80", 80), ("sm_90", 81), ("sm_90a", 81), ("sm_100", 86), ("sm_100a", 86), ("sm_120", 87)]
    + [("sm_121", 88), ("sm_100f", 88), ("sm_110", 90), ("sm_70", 80)],
)
def test_ptx_isa_version(arch, isa):
    assert ptx_isa_version(arch) == isa


def test_vector_atomic_adds_need_sm_90_and_ptx_8_1():
    assert Target.preset("a100").vector_atomic_add_bytes == 0
    assert Target.preset("mi300x").vector_atomic_add_bytes == 0
    assert Target.for_arch("sm_100").vector_atomic_add_bytes == 16
    # They need PTX 8.1: an sm_90 target cannot declare less.
    with pytest.raises(TargetError, match="isa_version must be at least 81"):
        attrs.evolve(Target.preset("h100"), isa_version=80)


def test_resolve_defaults():
    assert Target.resolve(None, None) == Target.preset("h100")
    assert Target.resolve(None, None, "rocm") == Target.preset("mi300x")
    assert Target.resolve("rocm", None) == Target.preset("mi300x")
    assert Target.resolve("cuda", None) == Target.preset("h100")


def test_resolve_by_arch_or_preset():
    assert Target.resolve(None, "sm_80") == Target.preset("a100")
    assert Target.resolve(None, "gfx90a") == Target.preset("mi250x")
    assert Target.resolve("h200", None) == Target.preset("h200")
    assert Target.resolve("h100", "sm_90") == Target.preset("h100")
    assert Target.resolve("a100", None, "cuda") == Target.preset("a100")


def test_resolve_arch_overrides_the_preset_arch():
    target = Target.resolve("h100", "sm_90a")
    assert target.name == "h100@sm_90a"
    assert target.arch == "sm_90a"
    assert target.core_count == 132
    assert Target.resolve("h100", "sm_100").isa_version == 86
    assert Target.resolve("mi300x", "gfx950").arch == "gfx950"


def test_resolve_backend_name_with_arch_picks_that_arch_preset():
    assert Target.resolve("cuda", "sm_80") == Target.preset("a100")
    assert Target.resolve("rocm", "gfx90a") == Target.preset("mi250x")


@pytest.mark.parametrize(
    "target, arch, backend, message",
    [
        ("h100", "gfx942", None, "'gfx942' is a rocm arch, but target 'h100' is a cuda"),
        ("mi300x", "sm_90", None, "'sm_90' is a cuda arch, but target 'mi300x' is a rocm"),
        ("cuda", "gfx942", None, "mi300x' is a rocm device, not cuda"),
        ("rocm", None, "cuda", "--target rocm contradicts backend cuda"),
        ("h100", None, "rocm", "'h100' is a cuda device, not rocm"),
        (None, "sm_80", "rocm", "'a100' is a cuda device, not rocm"),
        ("b200", None, None, "unknown target preset 'b200'"),
        ("h100", "sm90", None, "unknown GPU arch 'sm90'"),
        (None, None, "vulkan", "unknown backend 'vulkan'"),
    ],
)
def test_resolve_refuses(target, arch, backend, message):
    with pytest.raises(TargetError, match=message):
        Target.resolve(target, arch, backend)


def test_from_device_round_trip():
    h100 = Target.preset("h100")
    device = Target.from_device(attrs.asdict(h100))
    assert device == attrs.evolve(h100, name="device:sm_90")


def test_from_device_fills_missing_numbers_from_the_closest_preset():
    device = Target.from_device(
        {"arch": "gfx90a:sramecc+:xnack-", "core_count": 104, "device_memory_size": 68702699520}
    )
    mi250x = Target.preset("mi250x")
    assert (device.name, device.arch, device.backend) == ("device:gfx90a", "gfx90a", "rocm")
    assert device.core_count == 104
    assert device.warp_size == mi250x.warp_size
    assert device.l2_cache_size == mi250x.l2_cache_size
    assert "from preset mi250x" in device.source
    assert "core_count" not in device.source

    ada = Target.from_device({"arch": "sm_89", "core_count": 128, "compute_capability": [8, 9]})
    assert (ada.name, ada.compute_capability, ada.core_count) == ("device:sm_89", (8, 9), 128)


@pytest.mark.parametrize(
    "properties, message",
    [
        ({"core_count": 1}, "must include arch"),
        ({"arch": "sm_90", "sm_count": 132}, "unknown device properties: sm_count"),
        ({"arch": "sm_90", "backend": "rocm"}, "backend 'rocm' contradicts arch 'sm_90'"),
        ({"arch": "sm_90", "warp_size": 16}, "warp_size must be 32 or 64, got 16"),
        ({"arch": "tpu_v5"}, "unknown GPU arch 'tpu_v5'"),
    ],
)
def test_from_device_refuses(properties, message):
    with pytest.raises(TargetError, match=message):
        Target.from_device(properties)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"core_count": 0}, "core_count must be a positive integer, got 0"),
        ({"core_count": -4}, "core_count must be a positive integer, got -4"),
        ({"l2_cache_size": 1.5}, "l2_cache_size must be a positive integer, got 1.5"),
        ({"block_dim_limit_z": True}, "block_dim_limit_z must be a positive integer, got True"),
        ({"clock_rate_ghz": 0.0}, "clock_rate_ghz must be a positive number, got 0.0"),
        ({"clock_rate_ghz": float("nan")}, "clock_rate_ghz must be a positive number"),
        ({"backend": "metal"}, "backend must be one of cuda, rocm, got 'metal'"),
        ({"warp_size": 48}, "warp_size must be 32 or 64, got 48"),
        ({"arch": "gfx942"}, "arch must be a cuda arch .*, got 'gfx942'"),
        ({"arch": "sm90"}, "arch must be a cuda arch .*, got 'sm90'"),
        ({"compute_capability": (8, 0)}, r"compute_capability must be \(9, 0\)"),
        ({"isa_version": 78}, "isa_version must be at least 81"),
        ({"name": None}, "name must be a string, got None"),
        ({"shared_memory_per_block": 300000}, "shared_memory_per_block .* must not exceed"),
        ({"threads_per_block_limit": 1000}, "must be a multiple of warp_size"),
    ],
)
def test_invalid_fields_raise_naming_the_field(changes, message):
    with pytest.raises(TargetError, match=message):
        attrs.evolve(Target.preset("h100"), **changes)


def test_rocm_arch_must_be_gfx():
    with pytest.raises(TargetError, match="arch must be a rocm arch .*, got 'sm_90'"):
        attrs.evolve(Target.preset("mi300x"), arch="sm_90")
    with pytest.raises(TargetError, match="compute_capability must be None"):
        attrs.evolve(Target.preset("mi300x"), compute_capability=(9, 4))


def test_target_is_frozen_and_hashable():
    h100 = Target.preset("h100")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        h100.core_count = 1
    assert len({h100, Target.preset("h100"), Target.preset("a100")}) == 2


def test_fields_are_keyword_only():
    with pytest.raises(TypeError):
        Target("h100", "cuda")  # type: ignore[misc]


def test_fp8_tensor_cores_from_compute_capability_8_9():
    """fp8 GEMMs (cuBLASLt's, PTX mma .e4m3/.e5m2) need sm_89 or later: Ada and Hopper
    have them, Ampere and the AMD presets do not."""
    assert Target.preset("h100").fp8
    assert Target.for_arch("sm_89").fp8
    assert not Target.preset("a100").fp8
    assert not Target.for_arch("sm_86").fp8
    assert not Target.preset("mi300x").fp8
