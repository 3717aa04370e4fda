"""Coverage-guided fuzzing of the HLO parser with atheris (libFuzzer for Python).

The mutation fuzzer (:mod:`heron_fuzz.mutations`) changes the corpus with
rules; this one lets coverage steer: libFuzzer keeps every input that reaches
a new branch of ``heron.hlo`` (the lexer, parser, attribute parsers,
verifier and printer are instrumented) and mutates those further.

The property, for any bytes: :func:`check_one` either refuses them with an
``HloError`` (heron's located message), or parses a module whose printed text
parses again. Anything else (an IndexError, a RecursionError, a parse of the
printed text that fails) is a finding; atheris stops, prints the traceback and
saves the input as ``crash-<sha1>`` (replay: ``python -m heron_fuzz.parser_atheris
crash-...``).

    nox -s fuzz-parser                                   # 300 s from the corpus
    python -m heron_fuzz.parser_atheris DIR -max_total_time=600 -rss_limit_mb=2048

``DIR`` is the working corpus (the seeds: the XLA corpus's .hlo files, which
``nox -s fuzz-parser`` copies there; libFuzzer adds what it finds).
"""

from __future__ import annotations

import sys

#: Inputs larger than this are not tried: the parser's cost grows with them and
#: the memory budget refuses files, not strings, so keep the runs fast.
MAX_INPUT_BYTES = 64 * 1024


def check_one(data: bytes) -> None:
    """The property (see the module docstring); raises on a finding."""
    from heron.hlo.errors import HloError
    from heron.hlo.parser import decode_hlo_text, parse_module
    from heron.hlo.printer import print_module

    if len(data) > MAX_INPUT_BYTES:
        return
    try:
        module = parse_module(decode_hlo_text(data, "<fuzz>"), "<fuzz>")
    except HloError:
        return
    printed = print_module(module)
    try:
        parse_module(printed, "<printed>")
    except HloError as exc:
        raise AssertionError(f"heron cannot parse what it printed: {exc}\n{printed}") from exc


def main(argv: list[str] | None = None) -> None:
    import atheris

    with atheris.instrument_imports(include=["heron.hlo"]):
        import heron.hlo.parser  # noqa: F401
        import heron.hlo.printer  # noqa: F401

    atheris.Setup(list(argv if argv is not None else sys.argv), check_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
