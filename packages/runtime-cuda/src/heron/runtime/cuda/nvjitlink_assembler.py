"""PTX -> cubin inside this process, through nvJitLink (``cuda.bindings.nvjitlink``).

nvJitLink carries the ptxas of the ``nvidia-cuda-nvcc`` wheel's executable (its
log quotes "ptxas") and runs it in this process: starting the executable costs
6-7 ms of a compile's wall time, and every program with a kernel pays it (the
three kernels of ``adam_step``: 22 ms as a process, 17 ms here). nvJitLink
leaves the GIL while it works, so the batched ``cubin`` stage still overlaps
Python work on the other threads.

It compiles each input relocatably (``ptxas -c``) and links: each kernel's
machine code is ``ptxas -c``'s, relocations resolved
(``tests/test_nvjitlink_assembler.py``). Against the whole-program ptxas heron
ran before, 105 of the program corpus's 143 kernels come out identical; the
others choose other instructions of the same count (zeroing a register with
``HFMA2.MMA`` rather than ``IMAD.MOV``): 9,440 SASS lines against 9,416, the
difference alignment padding of three kernels (docs/benchmarks.md).

:func:`unavailable_reason` is None where the library loads (the
``nvidia-nvjitlink`` wheel, part of the ``[compile]`` extra), otherwise why
not; ``heron.runtime.cuda.compiler_tools`` then runs the executable instead.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

__all__ = ["NvJitLinkRejected", "assemble", "combined", "unavailable_reason"]


class NvJitLinkRejected(Exception):
    """nvJitLink's ptxas rejected the PTX; ``log`` is its error log, in ptxas's words."""

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


@functools.cache
def unavailable_reason() -> str | None:
    """None where nvJitLink can be called here; otherwise why it cannot (asked once)."""
    try:
        from cuda.bindings import nvjitlink
    except ImportError as exc:
        return f"cuda.bindings.nvjitlink is not importable ({exc})"
    try:
        nvjitlink.version()
    except Exception as exc:  # the library itself is missing: cuda-bindings loads it lazily
        return f"libnvJitLink could not be loaded ({type(exc).__name__}: {exc})"
    return None


def assemble(
    modules: Mapping[str, str], arch: str, opt_level: int | None, keep_output: bool
) -> bytes:
    """Assemble the PTX ``modules`` (name -> text) into one cubin for ``arch``.

    Returns the cubin's bytes, or ``b""`` when ``keep_output`` is false (the PTX is
    only checked). ``opt_level`` None is ptxas's default. Modules that can be one
    PTX module (:func:`combined`) are given to nvJitLink as one: it sets ptxas up
    once per input (4-5 ms each), as the executable is started once for all its
    files. Raises :class:`NvJitLinkRejected` with the log, its "ptx input" lines
    naming the rejected module as ``NAME.ptx`` (as the executable's messages name
    files) and their line numbers that module's own.
    """
    together = combined(modules) if len(modules) > 1 else None
    if together is None:
        return _assemble_inputs(modules, arch, opt_level, keep_output)
    try:
        return _assemble_inputs({"+".join(modules): together}, arch, opt_level, keep_output)
    except NvJitLinkRejected:
        for name, ptx in modules.items():  # find the module at fault, for its own log
            _assemble_inputs({name: ptx}, arch, opt_level, keep_output=False)
        raise


def combined(modules: Mapping[str, str]) -> str | None:
    """The PTX ``modules`` as one module, or None where they cannot be one: their
    headers (``.version``, ``.target``, ``.address_size``) differ, or a symbol they
    declare outside their functions would be declared twice (a kernel's name, a
    ``.global``, ``.shared`` or ``.func``). Each kernel stays what it was: ptxas
    compiles every function of a module on its own."""
    header: str | None = None
    bodies = []
    declared: set[str] = set()
    for ptx in modules.values():
        split = _HEADER.match(ptx)
        if split is None:
            return None
        this_header = "\n".join(line.strip() for line in _DIRECTIVES.findall(split.group(1)))
        if header is None:
            header = this_header
        elif this_header != header:
            return None
        body = ptx[split.end() :]
        for name in _module_symbols(body):
            if name in declared:
                return None
            declared.add(name)
        bodies.append(body)
    first = _HEADER.match(next(iter(modules.values())))
    assert first is not None
    return first.group(0) + "\n".join(bodies)


#: A PTX module's header: everything up to and including ``.address_size``.
_HEADER = re.compile(r"(?s)\A(.*?^\.address_size[ \t]+\d+[ \t]*\n)", re.MULTILINE)
_DIRECTIVES = re.compile(r"^\.(?:version|target|address_size)\b.*$", re.MULTILINE)
#: A symbol declared at a module's top level: its name is the word before ``(``,
#: ``[``, ``;`` or the end of the declaration's first line.
_DECLARATION = re.compile(
    r"^\.(?:visible|extern|weak|global|shared|const|entry|func)\b[^\n]*?"
    r"([A-Za-z_$%][\w$%]*)\s*(?:\(|\[|;|$)",
    re.MULTILINE,
)


#: A ``.func``'s return parameters, which come before its name.
_RETURN_PARAMETERS = re.compile(r"\.func\s*\([^)]*\)\s*")


def _module_symbols(body: str) -> list[str]:
    """The names a PTX module's body declares at its top level (outside any braces)."""
    names = []
    depth = 0
    for line in body.splitlines():
        if depth == 0:
            declaration = _DECLARATION.match(_RETURN_PARAMETERS.sub(".func ", line))
            if declaration:
                names.append(declaration.group(1))
        depth += line.count("{") - line.count("}")
    return names


def _assemble_inputs(
    modules: Mapping[str, str], arch: str, opt_level: int | None, keep_output: bool
) -> bytes:
    """One nvJitLink run over the PTX ``modules``, each given as an input of its own."""
    from cuda.bindings import nvjitlink

    options = [f"-arch={arch}"]
    if opt_level is not None:
        options.append(f"-O{opt_level}")
    handle = nvjitlink.create(len(options), options)
    try:
        try:
            for name, ptx in modules.items():
                data = ptx.encode()
                nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            raise NvJitLinkRejected(_error_log(handle) or str(exc)) from None
        if not keep_output:
            return b""
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


def _error_log(handle: int) -> str:
    """nvJitLink's error log with its anonymous "ptx input" named as the module it was.

    ptxas inside nvJitLink calls every input "ptx input"; the log's last line names
    the input that failed ("JIT the PTX (NAME)"), so its lines are attributed to it."""
    from cuda.bindings import nvjitlink

    size = nvjitlink.get_error_log_size(handle)
    if size == 0:
        return ""
    buffer = bytearray(size)
    nvjitlink.get_error_log(handle, buffer)
    log = bytes(buffer).rstrip(b"\x00").decode(errors="replace").strip()
    failed = re.search(r"JIT the PTX \(([^)]*)\)", log)
    if failed:
        log = log.replace("ptxas application ptx input", f"ptxas {failed.group(1)}.ptx")
    return log
