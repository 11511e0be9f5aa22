"""The ``pdwatt`` command line: a thin shell over the calls the HTTP service makes.

Readable tables by default; ``--json`` prints the same document as the HTTP API.
Errors are printed as ``error: <field>: <reason>`` with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from model.errors import InputError, PdwattError
from service.cli import calibrate, core, dr, plan, serve, simulate


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pdwatt",
        description="Power-aware provisioning of prefill/decode disaggregated LLM inference.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    core.register(sub)
    simulate.register(sub)
    plan.register(sub)
    dr.register(sub)
    calibrate.register(sub)
    serve.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        out = a.func(a)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except PdwattError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if getattr(a, "json", False) and out is not None:
        sys.stdout.write(json_text(out))
        sys.stdout.write("\n")
    return 0


#: Above this size (characters, compact) ``--json`` output stays compact: indenting goes
#: through the json module's pure-Python encoder, about ten times slower (a front of
#: 1,024 GPUs, 523,776 configurations and 230 MB: 41 s indented against 5 s).
INDENT_LIMIT_CHARS = 10_000_000


def json_text(doc: Any) -> str:
    """``doc`` as JSON (no NaN or infinity): indented, unless the document is larger than
    :data:`INDENT_LIMIT_CHARS`, which is written compact (the same document)."""
    compact = json.dumps(doc, allow_nan=False)
    if len(compact) > INDENT_LIMIT_CHARS:
        return compact
    return json.dumps(doc, indent=2, allow_nan=False)
