"""heron.indexing: indexing maps and the analyses built on them (skeleton).

What will live here (see ARCHITECTURE.md): affine expressions; ``IndexingMap``
with dimensions, range and runtime symbols and constraints; its simplifier and
interval analysis; the HLO indexing analysis (output-to-input maps per op and
through whole fusions); and the thread-to-output maps the emitters start from.
Nothing of that exists yet in this version: importing the package only tells
that the distribution is installed.
"""

__version__ = "0.1.0"
