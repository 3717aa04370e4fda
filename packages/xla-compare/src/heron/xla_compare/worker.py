"""One deviceless XLA:GPU compile, in a process of its own (run as a script).

``python worker.py`` reads a JSON request on stdin and writes a JSON answer on
stdout. It needs only the standard library, ``jaxlib`` and the XLA CUDA PJRT
plugin (``jax-cuda13-pjrt``), and never imports heron: the Python running it
may be another environment's (``HERON_XLA_PYTHON``). An XLA CHECK failure
aborts this process, not the caller's; the caller reads the dump folder.

The request: ``hlo`` (module text with an ENTRY, every array shape with a
layout), ``target_config`` (a GpuTargetConfigProto in text form),
``dump_dir`` (none or empty: no dump), ``options`` (DebugOptions by name,
applied as overrides), and optionally ``plugin`` (the path of
``xla_cuda_plugin.so``) and ``warm_up`` (another module's text, compiled first
and untimed, so that ``seconds`` is a compile in a process that has compiled
before, as heron's compile-time figures are).

The route is the PJRT C API (``GetPjrtApi``): plugin initialisation, a
topology made from the target config (no device, no driver), then
``PJRT_Compile`` of the serialized HloModuleProto (program format ``hlo``, the
only one that keeps fusions, bitcasts and layouts as written). The
CompileOptionsProto goes without its DebugOptions, so a plugin newer than
jaxlib keeps its own defaults; the options travel as named overrides.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

#: Where PJRT_Api's function pointers start (struct_size, extension_start, then the
#: PJRT_Api_Version struct of 24 bytes), and the positions of the ones used here.
_FUNCTIONS_OFFSET = 40
_ERROR_DESTROY = 0
_ERROR_MESSAGE = 1
_PLUGIN_INITIALIZE = 3
_TOPOLOGY_CREATE = 82
_COMPILE = 89


def _args(*fields: tuple[str, object]) -> type[ctypes.Structure]:
    """A PJRT ``*_Args`` struct: struct_size and extension_start, then ``fields``."""
    return type(
        "Args",
        (ctypes.Structure,),
        {"_fields_": [("struct_size", ctypes.c_size_t), ("extension", ctypes.c_void_p), *fields]},
    )


_NamedValue = _args(
    ("name", ctypes.c_char_p),
    ("name_size", ctypes.c_size_t),
    ("type", ctypes.c_int),  # PJRT_NamedValue_kString = 0
    ("string_value", ctypes.c_char_p),
    ("value_size", ctypes.c_size_t),
)
_ErrorMessage = _args(
    ("error", ctypes.c_void_p), ("message", ctypes.c_void_p), ("message_size", ctypes.c_size_t)
)
_ErrorDestroy = _args(("error", ctypes.c_void_p))
_PluginInitialize = _args()
_TopologyCreate = _args(
    ("topology_name", ctypes.c_char_p),
    ("topology_name_size", ctypes.c_size_t),
    ("create_options", ctypes.POINTER(_NamedValue)),
    ("num_options", ctypes.c_size_t),
    ("topology", ctypes.c_void_p),
)
_Program = _args(
    ("code", ctypes.c_char_p),
    ("code_size", ctypes.c_size_t),
    ("format", ctypes.c_char_p),
    ("format_size", ctypes.c_size_t),
)
_Compile = _args(
    ("topology", ctypes.c_void_p),
    ("program", ctypes.POINTER(_Program)),
    ("compile_options", ctypes.c_char_p),
    ("compile_options_size", ctypes.c_size_t),
    ("client", ctypes.c_void_p),
    ("executable", ctypes.c_void_p),
)


def _make(struct: type[ctypes.Structure], **values: object) -> ctypes.Structure:
    instance = struct(**values)
    instance.struct_size = ctypes.sizeof(struct)
    return instance


class PjrtError(RuntimeError):
    """A PJRT call returned an error (the message is XLA's)."""


class _Plugin:
    def __init__(self, path: Path):
        self.library = ctypes.CDLL(str(path))
        self.library.GetPjrtApi.restype = ctypes.c_void_p
        self.api = self.library.GetPjrtApi()
        self.version = (
            ctypes.c_int.from_address(self.api + 32).value,
            ctypes.c_int.from_address(self.api + 36).value,
        )

    def _function(self, index: int, restype: object = ctypes.c_void_p):
        pointer = ctypes.c_void_p.from_address(self.api + _FUNCTIONS_OFFSET + 8 * index).value
        return ctypes.CFUNCTYPE(restype, ctypes.c_void_p)(pointer)

    def call(self, index: int, args: ctypes.Structure, what: str) -> ctypes.Structure:
        error = self._function(index)(ctypes.addressof(args))
        if error:
            message = _make(_ErrorMessage, error=error)
            self._function(_ERROR_MESSAGE, None)(ctypes.addressof(message))
            text = ctypes.string_at(message.message, message.message_size).decode(errors="replace")
            self._function(_ERROR_DESTROY, None)(
                ctypes.addressof(_make(_ErrorDestroy, error=error))
            )
            raise PjrtError(f"{what}: {text}")
        return args

    def topology(self, target_config: str) -> int:
        values = []
        for name, value in (("target_config", target_config), ("topology", "1x1x1")):
            data = value.encode()
            values.append(
                _make(
                    _NamedValue,
                    name=name.encode(),
                    name_size=len(name),
                    type=0,
                    string_value=data,
                    value_size=len(data),
                )
            )
        array = (_NamedValue * len(values))(*values)
        args = _make(
            _TopologyCreate,
            topology_name=b"",
            topology_name_size=0,
            create_options=array,
            num_options=len(values),
        )
        return self.call(_TOPOLOGY_CREATE, args, "PJRT_TopologyDescription_Create").topology

    def compile(self, topology: int, proto: bytes, options: bytes) -> None:
        program = _make(_Program, code=proto, code_size=len(proto), format=b"hlo", format_size=3)
        args = _make(
            _Compile,
            topology=topology,
            program=ctypes.pointer(program),
            compile_options=options,
            compile_options_size=len(options),
            client=None,
        )
        self.call(_COMPILE, args, "PJRT_Compile")


# -- protobuf wire format: removing one nested message field ---------------------------


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(data: bytes):
    """``(number, wire type, payload start, end)`` of each top-level field of a message."""
    at = 0
    while at < len(data):
        start = at
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        payload = at
        if wire == 0:
            _, at = _varint(data, at)
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == 2:
            size, payload = _varint(data, at)
            at = payload + size
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
        yield number, wire, start, payload, at


def without_debug_options(compile_options: bytes) -> bytes:
    """CompileOptionsProto bytes without executable_build_options.debug_options (3.3)."""
    out = bytearray()
    for number, wire, start, payload, end in _fields(compile_options):
        if number == 3 and wire == 2:
            inner = compile_options[payload:end]
            kept = b"".join(
                inner[s:e] for n, w, s, _, e in _fields(inner) if not (n == 3 and w == 2)
            )
            out += _encode_varint((3 << 3) | 2) + _encode_varint(len(kept)) + kept
        else:
            out += compile_options[start:end]
    return bytes(out)


# -- the compile --------------------------------------------------------------------------


def find_plugin(explicit: str | None) -> Path:
    """The PJRT plugin: the request's, ``$HERON_XLA_PLUGIN``, else jax-cuda13-pjrt's."""
    for candidate in (explicit, os.environ.get("HERON_XLA_PLUGIN")):
        if candidate:
            return Path(candidate)
    spec = importlib.util.find_spec("jax_plugins.xla_cuda13")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("jax-cuda13-pjrt is not installed (no jax_plugins.xla_cuda13)")
    for location in spec.submodule_search_locations:
        path = Path(location) / "xla_cuda_plugin.so"
        if path.is_file():
            return path
    raise FileNotFoundError("jax_plugins.xla_cuda13 has no xla_cuda_plugin.so")


def plugin_version(plugin: Path) -> str:
    """The jax-cuda13-pjrt version that ``plugin`` belongs to (its dist-info beside it)."""
    for info in sorted(plugin.parent.parent.parent.glob("jax_cuda*_pjrt-*.dist-info")):
        return info.name.removesuffix(".dist-info").split("-")[1]
    return "unknown"


def _compilation(hlo_text: str, overrides: dict) -> tuple[bytes, bytes]:
    """The serialized HloModuleProto of ``hlo_text`` and its CompileOptionsProto (one
    replica, one partition, the entry's layouts; ``overrides`` as named DebugOptions)."""
    import jaxlib._hlo as hlo_extension
    from jaxlib import xla_client

    module = hlo_extension.hlo_module_from_text(hlo_text)
    proto = module.as_serialized_hlo_module_proto()
    program_shape = hlo_extension.XlaComputation(proto).program_shape()
    options = xla_client.CompileOptions()
    options.argument_layouts = list(program_shape.parameter_shapes())
    build = options.executable_build_options
    build.result_layout = program_shape.result_shape()
    build.num_replicas = 1
    build.num_partitions = 1
    options.env_option_overrides = list(overrides.items())
    return proto, without_debug_options(options.SerializeAsString())


def compile_request(request: dict) -> dict:
    import jaxlib

    plugin_path = find_plugin(request.get("plugin"))
    overrides: dict = {}
    if request.get("dump_dir"):
        # With its large constants: a dumped module heron runs (`heron run` on XLA's
        # optimized module) must hold every value, not ``{...}``.
        overrides = {
            "xla_dump_to": request["dump_dir"],
            "xla_dump_hlo_as_text": True,
            "xla_dump_large_constants": True,
        }
    overrides.update(request.get("options", {}))
    proto, serialized = _compilation(request["hlo"], overrides)

    plugin = _Plugin(plugin_path)
    plugin.call(_PLUGIN_INITIALIZE, _make(_PluginInitialize), "PJRT_Plugin_Initialize")
    registered = register_gpu_custom_calls(plugin.api)
    topology = plugin.topology(request["target_config"])
    warm_up = request.get("warm_up")
    if warm_up:
        # Another module first, untimed and undumped: what a process pays once (LLVM's
        # and MLIR's set-up, libdevice, ptxas found) is not the timed module's.
        plugin.compile(topology, *_compilation(warm_up, dict(request.get("options", {}))))
    start = time.perf_counter()
    plugin.compile(topology, proto, serialized)
    seconds = time.perf_counter() - start
    return {
        "ok": True,
        "seconds": seconds,
        "warm": bool(warm_up),
        "plugin": str(plugin_path),
        "plugin_version": plugin_version(plugin_path),
        "pjrt_api": f"{plugin.version[0]}.{plugin.version[1]}",
        "jaxlib_version": getattr(jaxlib, "__version__", None) or _jaxlib_version(),
        "custom_calls_registered": registered,
    }


#: jaxlib's modules whose ``registrations()`` list jax's GPU custom calls per platform,
#: each ``(target, handler, api_version)`` (cuSOLVER, the hybrid eigensolvers, the LU
#: pivots, the PRNG, cuSPARSE): jax registers exactly these when it loads its CUDA plugin.
_GPU_CUSTOM_CALL_MODULES = ("gpu_solver", "gpu_linalg", "gpu_prng", "gpu_sparse")


def register_gpu_custom_calls(api: int) -> int:
    """Register jax's GPU custom calls (``cusolver_potrf_ffi``, ``cu_lu_pivots_to_permutation``,
    ...) with the plugin at PJRT API address ``api``, each with the API version jaxlib
    gives it, as jax does when it loads its CUDA plugin: XLA:GPU compiles a module
    holding them only then. The handlers come from jax's CUDA plugin package of this
    Python (jax-cuda13-plugin); a deviceless compile never runs them. Returns how many
    were registered (0 where that package is absent)."""
    import importlib

    try:
        extension = importlib.import_module("jax_cuda13_plugin.cuda_plugin_extension")
    except ImportError:
        return 0
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
    c_api = new_capsule(api, b"pjrt_c_api", None)
    count = 0
    for name in _GPU_CUSTOM_CALL_MODULES:
        try:
            module = importlib.import_module(f"jaxlib.{name}")
        except ImportError:
            continue
        listed = getattr(module, "registrations", dict)()
        for target, handler, version in listed.get("CUDA", ()):
            extension.register_custom_call_target(c_api, target, handler, "CUDA", version)
            count += 1
    return count


def _jaxlib_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jaxlib")
    except PackageNotFoundError:
        return "unknown"


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        answer = compile_request(request)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the answer's error
        answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
