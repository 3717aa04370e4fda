"""Test support for emitter and pass authors (host JIT of scalar MLIR; see :mod:`.host_jit`)."""
