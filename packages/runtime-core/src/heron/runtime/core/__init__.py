"""heron.runtime.core: the target-independent runtime.

``heron.runtime`` is a namespace shared by three distributions:
heron-runtime-core (this package, ``heron.runtime.core``), heron-runtime-cuda
(``heron.runtime.cuda``) and heron-runtime-rocm (``heron.runtime.rocm``). It
has no ``__init__.py`` so that each of them can be installed, editable or not,
without the others; see the README's "Package layout".

Today this package holds the plugin contract for backends:
``heron.runtime.core.hookspecs`` (the ``heron_backend_specs`` hook and
``BackendSpec``) and ``heron.runtime.core.registry`` (loading the
``heron.backends`` entry-point group and choosing a backend).

What will live here too (see ARCHITECTURE.md): thunks and thunk emission, the
command-buffer conversion pass, executables and their serialised artefact, the
device interface, and the interpreter device (a SIMT emulator on the CPU).
"""

__version__ = "0.1.0"
