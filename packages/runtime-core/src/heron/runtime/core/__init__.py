"""heron.runtime.core: what every backend and device shares, with no compiler.

``heron.runtime`` is a namespace shared by four distributions:
heron-runtime-core (this package), heron-runtime-interpreter
(``heron.runtime.interpreter``), heron-runtime-cuda (``heron.runtime.cuda``)
and heron-runtime-rocm (``heron.runtime.rocm``). It has no ``__init__.py``, so
that each of them can be installed, editable or not, without the others.

- ``device``: the device interface (``Device``, ``DeviceBuffer``,
  ``KernelImage``): allocate, copy in and out, load a kernel image, launch;
- ``hookspecs``: the plugin contract for backends (the ``heron_backend_specs``
  hook, ``BackendSpec``, and its ``Stage`` list from a ``lower-tensors``
  module to a KernelImage);
- ``registry``: loading the ``heron.backends`` entry-point group and choosing
  a backend;
- ``driver_probe``, ``gpu_backend``: what the CUDA and ROCm backends share
  (is there a driver; the spec of a backend that compiles but cannot launch yet).
- ``thunks``: the thunk types an executable's program is made of (kernel,
  copy, memset, sequential, while, conditional, library call, custom call,
  command buffer), validated, with their JSON form;
- ``host_calls``: custom calls run on the host by their ``heron.custom_calls``
  plugins (:mod:`heron.hlo.custom_calls`), resolved when an artefact loads;
- ``artefact``: the executable artefact file (a zip with a verified manifest),
  ``save`` and ``load``;
- ``executor``: an artefact loaded on a device and run (thunks, command buffers,
  library and host calls); ``command_buffers``: the conversion that decides the
  graphs;
- ``resident`` and ``dlpack``: runs on arrays that stay on the device, exchanged
  with other libraries through DLPack (heron.jax's path);
- ``heron_run``: the ``heron-run`` console script (verify, describe and run an artefact).

It imports heron.hlo only, never MLIR, llvmlite or heron's compile side (the
import-linter contracts check it): a machine that only runs compiled kernels
needs none of them (docs/runtime.md).
"""

__version__ = "0.1.0"
