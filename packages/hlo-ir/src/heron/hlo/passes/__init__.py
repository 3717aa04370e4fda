"""Target-independent HLO passes: each a module of its own that rewrites a module.

``outline`` gives every computing instruction of an unfused entry computation
(as JAX prints it) a fusion of its own.
"""

from heron.hlo.passes.outline import HOST_OPCODES, REFUSED_OPCODES, outline_module

__all__ = ["HOST_OPCODES", "REFUSED_OPCODES", "outline_module"]
