"""Typed errors raised by the analytical core.

Every error names the input field at fault and the reason, so that the CLI can
print it and the HTTP service can map it to an RFC 9457 problem response.
"""

from __future__ import annotations

from collections.abc import Iterable


class PdwattError(Exception):
    """Base class of every error pdwatt raises on purpose."""


class InputError(PdwattError, ValueError):
    """An input value is invalid: `field` names it, `reason` says why."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")

    def __reduce__(self) -> tuple[object, ...]:  # picklable across worker processes
        return (_rebuild, (type(self), self.__dict__, str(self)))


class NotFoundError(InputError):
    """A name (model, GPU, workload preset) is not in the catalog."""

    def __init__(self, field: str, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = sorted(known)
        super().__init__(field, f"unknown {field} {name!r}; known: {', '.join(self.known)}")


class DoesNotFitError(InputError):
    """The model and its KV-cache pool do not fit on the GPU memory."""


class OutsideTableError(InputError):
    """A kernel shape lies outside what a measured kernel table covers: `table` names
    the table's file (relative to its database), `shape` the shape asked for."""

    def __init__(self, table: str, shape: dict[str, object], reason: str) -> None:
        self.table = table
        self.shape = dict(shape)
        text = ", ".join(f"{k}={v!r}" for k, v in self.shape.items())
        super().__init__("shape", f"{table}: {text}: {reason}")


def _rebuild(cls: type, state: dict[str, object], message: str) -> Exception:
    err: Exception = Exception.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err
