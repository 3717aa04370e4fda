"""heron.plugins: the built-in hero emitters, one module each.

``heron.plugins.loop`` is the loop emitter (the default hero). Each emitter
is registered through the ``heron.emitters`` entry-point group in this
distribution's pyproject.toml, exactly as a third-party emitter would be, and
implements the ``heron_emitter_specs`` hook of ``heron.emitters.hookspecs``.
The transpose, reduction, scatter, concatenate, in-place
dynamic-update-slice and input-slices emitters come next (issue 6).
"""

__version__ = "0.1.0"
