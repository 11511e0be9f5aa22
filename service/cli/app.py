"""The ``pdwatt`` command line: a thin shell over the calls the HTTP service makes.

Readable tables by default; ``--json`` prints the same document as the HTTP API.
Errors are printed as ``error: <field>: <reason>`` with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from model.errors import InputError, PdwattError
from service.cli import calibrate, core, dr, plan, serve, simulate


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pdwatt",
        description="Power-aware provisioning of prefill/decode disaggregated LLM inference.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = p.add_subparsers(dest="command", required=True)
    core.register(sub)
    simulate.register(sub)
    plan.register(sub)
    dr.register(sub)
    calibrate.register(sub)
    serve.register(sub)
    return p


def version() -> str:
    """The installed package's version (its metadata); a source tree that was never
    installed says so."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("pdwatt")
    except PackageNotFoundError:
        return "(not installed: no package metadata)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0].startswith("-") and args[0] not in ("-h", "--help", "--version"):
        # argparse would say only that a command is required
        parser.error(f"unrecognized argument {args[0]!r}: the command comes first, e.g. "
                     "pdwatt plan --demo")  # fmt: skip
    a = parser.parse_args(args)
    try:
        out = a.func(a)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except PdwattError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if getattr(a, "json", False) and out is not None:
        write_json(out, sys.stdout)
    return int(getattr(a, "exit_status", 0))  # 1: the result printed, a file not written


#: Above this size (characters, compact) ``--json`` output is written compact: indenting
#: goes through the json module's pure-Python encoder, about ten times slower (a front of
#: 1,024 GPUs, 523,776 configurations and 230 MB: 41 s indented against 5 s).
INDENT_LIMIT_CHARS = 10_000_000


def compact_chunks(doc: Any) -> Iterator[str]:
    """``json.dumps(doc)`` (compact, no NaN or infinity) in pieces: objects and lists
    are opened here and each list element is encoded on its own, so that a document of
    millions of records is never one string (its pieces joined are exactly
    ``json.dumps(doc, allow_nan=False)``)."""
    if isinstance(doc, dict):
        yield "{"
        for i, (key, value) in enumerate(doc.items()):
            # the key as json.dumps writes it (a non-string key becomes a string)
            yield ("" if i == 0 else ", ") + json.dumps({key: None})[1:-7] + ": "
            yield from compact_chunks(value)
        yield "}"
    elif isinstance(doc, list | tuple):
        yield "["
        for i, item in enumerate(doc):
            yield ("" if i == 0 else ", ") + json.dumps(item, allow_nan=False)
        yield "]"
    else:
        yield json.dumps(doc, allow_nan=False)


def write_json(doc: Any, stream: TextIO) -> None:
    """``doc`` as JSON (no NaN or infinity) and a newline: indented, unless the compact
    form is over :data:`INDENT_LIMIT_CHARS`; then compact (the same document), written
    piece by piece."""
    size = 0
    for piece in compact_chunks(doc):
        size += len(piece)
        if size > INDENT_LIMIT_CHARS:
            for part in compact_chunks(doc):
                stream.write(part)
            stream.write("\n")
            return
    stream.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
