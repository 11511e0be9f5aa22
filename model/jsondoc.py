"""JSON documents as users send them: read whole or refused with the field and the reason,
never with a key silently dropped. Python's ``json`` keeps the last of a key given twice
in one object (``{"n_p": 3, "n_p": 5}`` reads as ``n_p`` 5); here that is an error naming
the object's path and the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model.errors import InputError


class _Repeated(dict[str, Any]):
    """An object that gave a key more than once (the first such key in ``repeated``)."""

    repeated: str = ""


def _parse(text: str | bytes) -> tuple[Any, bool]:
    """``text`` as JSON, and whether an object in it gave a key twice (only then is the
    document walked to say where)."""
    seen = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal seen
        out = dict(items)
        if len(out) < len(items):
            seen = True
            out = _Repeated(out)
            keys: set[str] = set()
            for k, _ in items:  # the first key given again
                if k in keys:
                    out.repeated = k
                    break
                keys.add(k)
        return out

    return json.loads(text, object_pairs_hook=pairs), seen


def _find(doc: Any, path: str) -> tuple[str, str] | None:
    """The path and key of the first object of ``doc`` (depth first, in document order)
    that repeated a key."""
    stack: list[tuple[Any, str]] = [(doc, path)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, _Repeated):
            return at, node.repeated
        if isinstance(node, dict):
            items = [(v, f"{at}.{k}" if at else str(k)) for k, v in node.items()]
        elif isinstance(node, list):
            items = [(v, f"{at}[{i}]") for i, v in enumerate(node)]
        else:
            continue
        stack.extend(reversed(items))
    return None


def repeated_key(text: str | bytes) -> tuple[str, str] | None:
    """Where a JSON document gives a key twice in one object: the object's path (``""``
    for the top level, else e.g. ``deployments[0].initial``) and the key; None when no
    object does (or when ``text`` is not JSON: its parser says why)."""
    try:
        doc, seen = _parse(text)
    except (ValueError, RecursionError):
        return None
    return _find(doc, "") if seen else None


def repeated_reason(key: str) -> str:
    """Why an object that gives ``key`` twice is refused."""
    return f"the key {key!r} is given more than once in one object: one value would be lost"


def loads(text: str, field: str, source: str = "") -> Any:
    """``text`` as JSON; :class:`InputError` naming ``field`` when it is not JSON, and
    naming the object's path under ``field`` when an object gives a key twice."""
    try:
        doc, seen = _parse(text)
    except json.JSONDecodeError as e:
        where = f"{source} " if source else ""
        raise InputError(field, f"{where}is not valid JSON: line {e.lineno}: {e.msg}") from None
    except RecursionError:
        raise InputError(field, "nests too deeply to be read") from None
    found = _find(doc, "") if seen else None
    if found is not None:
        at, key = found
        where = f"{source}: " if source else ""
        raise InputError(field, f"{where}{at or 'the top-level object'}: {repeated_reason(key)}")
    return doc


def read(path: str | Path, field: str) -> Any:
    """The JSON document in file ``path``; :class:`InputError` naming ``field`` when it
    cannot be read, is not UTF-8 text, is not JSON or gives a key twice in an object."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise InputError(field, f"cannot read {path}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(
            field, f"{path} is not UTF-8 text (byte {e.start}: 0x{raw[e.start]:02x})"
        ) from None
    return loads(text, field, str(path))
