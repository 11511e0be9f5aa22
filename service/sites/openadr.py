"""OpenADR 3.1.0 events in: pydantic models, and the ISO 8601 durations they hold; their
translation into grid signals is :mod:`service.sites.signals`.

The models follow the field names of the OpenADR 3.1.0 ``event`` schema (``programID``,
``eventName``, ``priority``, ``intervalPeriod`` {``start``, ``duration``,
``randomizeStart``}, ``intervals[]`` {``id``, ``intervalPeriod``, ``payloads[]``
{``type``, ``values``}}, ``payloadDescriptors[]`` {``payloadType``, ``units``,
``currency``}), so an event taken from a VTN is accepted as it is. Unknown fields are
refused (a misspelt field would otherwise drop a signal without a word). The fields
whose content is not typed (``targets``, ``reportDescriptors``, a payload's ``values``)
are kept as sent, nested at most :data:`service.requests.schemas.MAX_JSON_DEPTH` levels deep.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from model.errors import InputError
from service.requests.schemas import NUL, SHALLOW, DateTimeText

CAP = "IMPORT_CAPACITY_LIMIT"
PRICE = "PRICE"
GHG = "GHG"
SUPPORTED = (CAP, PRICE, GHG)
SIGNAL_OF = {CAP: "power_cap_w", PRICE: "price_usd_per_mwh", GHG: "carbon_g_per_kwh"}
# largest value of each signal after conversion (price and carbon as in the schedule
# request's checks; a cap above 1 TW is no cap)
MAX_OF = {CAP: 1e12, PRICE: 1e5, GHG: 1e5}
UNIT_OF = {CAP: "W", PRICE: "USD/MWh", GHG: "g/kWh"}
MAX_SEGMENTS = 100_000
FAR = datetime(9999, 12, 1, tzinfo=UTC)  # stands for "later than anything planned"

# ---------------------------------------------------------------- models (OpenADR 3.1.0)

#: an ISO 8601 duration as OpenADR 3.1.0 writes it, in ASCII digits: at least one
#: component, and a time component after ``T``
DURATION_PATTERN = (
    r"^(-?)P(?=[0-9]|T[0-9])(?:([0-9]+)Y)?(?:([0-9]+)M)?(?:([0-9]+)([DW]))?"
    r"(?:T(?=[0-9])(?:([0-9]+)H)?(?:([0-9]+)M)?(?:([0-9]+(?:\.[0-9]+)?)S)?)?$"
)


def _duration_text(v: str) -> str:
    """``v`` as sent when :func:`parse_duration` reads it; its reason otherwise (pydantic
    names the field)."""
    try:
        parse_duration("duration", v)
    except InputError as e:
        raise ValueError(e.reason) from None
    return v


#: an ISO 8601 duration field (``PT15M``, ``P1D``), checked by :func:`parse_duration`
Iso8601Duration = Annotated[
    str,
    AfterValidator(_duration_text),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN}),
]
#: a free-form list, stored as sent within :data:`~service.requests.schemas.MAX_JSON_DEPTH` levels
FreeList = Annotated[list[Any], SHALLOW]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IntervalPeriod(_Strict):
    """Start and duration of an interval, or default of an event's intervals."""

    start: DateTimeText = Field(description="ISO 8601 date-time with a UTC offset")
    duration: Iso8601Duration | None = Field(None, description="ISO 8601 duration, e.g. PT1H")
    randomizeStart: Iso8601Duration | None = Field(
        None, description="not applied (see module notes)"
    )


class ValuesMap(_Strict):
    """One payload: a type and its values (OpenADR ``valuesMap``)."""

    type: str = Field(min_length=1, max_length=128)
    values: FreeList


class Interval(_Strict):
    id: int = Field(description="client number of the interval; not a sequence number")
    intervalPeriod: IntervalPeriod | None = None
    payloads: list[ValuesMap]


class EventPayloadDescriptor(_Strict):
    objectType: Literal["EVENT_PAYLOAD_DESCRIPTOR"] | None = None
    payloadType: str = Field(min_length=1, max_length=128)
    units: str | None = None
    currency: str | None = None


def _nul_at(doc: Any, at: str = "") -> str | None:
    """The path of the first text (key or value) of ``doc`` holding the NUL character."""
    stack: list[tuple[Any, str]] = [(doc, at)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str) and NUL in node:
            return where or "event"
        if isinstance(node, dict):
            for k, v in node.items():
                path = f"{where}.{k}" if where else str(k)
                if isinstance(k, str) and NUL in k:
                    return path
                stack.append((v, path))
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return None


class OadrEvent(_Strict):
    """An OpenADR 3.1.0 event object (the fields a VTN sends; provisioned ones optional).
    No text of it may hold the NUL character: the event is stored as sent, and
    PostgreSQL's text cannot hold it."""

    def unapplied(self) -> list[str]:
        """What of the event is not applied, as the answer's notes say it."""
        ip = self.intervalPeriod
        if ip is None or ip.randomizeStart in (None, "PT0S"):
            return []
        return [f"randomizeStart {ip.randomizeStart} is not applied: the site is planned as "
                "one resource from the nominal start"]  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, v: Any) -> Any:
        where = _nul_at(v)
        if where is not None:
            raise ValueError(f"{where} holds the NUL character (U+0000), which is not stored")
        return v

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "programID": "site-dr",
                    "eventName": "evening-peak",
                    "priority": 0,
                    "payloadDescriptors": [
                        {
                            "objectType": "EVENT_PAYLOAD_DESCRIPTOR",
                            "payloadType": "IMPORT_CAPACITY_LIMIT",
                            "units": "KW",
                        },
                        {"payloadType": "PRICE", "units": "KWH", "currency": "USD"},
                    ],
                    "intervalPeriod": {"start": "2026-07-01T17:00:00Z", "duration": "PT1H"},
                    "intervals": [
                        {
                            "id": 0,
                            "payloads": [
                                {"type": "IMPORT_CAPACITY_LIMIT", "values": [24]},
                                {"type": "PRICE", "values": [0.35]},
                            ],
                        },
                        {
                            "id": 1,
                            "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [20, 22]}],
                        },
                    ],
                }
            ]
        },
    )

    id: str | None = Field(None, max_length=128)
    createdDateTime: DateTimeText | None = None
    modificationDateTime: DateTimeText | None = None
    objectType: Literal["EVENT"] | None = None
    programID: str = Field(min_length=1, max_length=128)
    eventName: str | None = Field(None, max_length=128)
    priority: int | None = Field(None, ge=0)
    duration: Iso8601Duration | None = None
    targets: FreeList | None = None
    reportDescriptors: Annotated[list[dict[str, Any]], SHALLOW] | None = None
    payloadDescriptors: list[EventPayloadDescriptor] | None = None
    intervalPeriod: IntervalPeriod | None = None
    intervals: list[Interval]


# ---------------------------------------------------------------- ISO 8601 durations


@dataclass(frozen=True)
class Duration:
    """An ISO 8601 duration: calendar months (years x 12 + months) plus exact time."""

    months: int
    time: timedelta

    @property
    def is_zero(self) -> bool:
        return self.months == 0 and self.time == timedelta(0)

    def times(self, k: int) -> Duration:
        try:
            return Duration(self.months * k, self.time * k)
        except OverflowError:
            return Duration(self.months * k, timedelta.max)

    def after(self, t: datetime) -> datetime:
        """``t`` plus this duration (calendar months first); :data:`FAR` past year 9998."""
        if self.months:
            total = t.year * 12 + (t.month - 1) + self.months
            year, month = divmod(total, 12)
            if year > 9998:
                return FAR
            day = min(t.day, calendar.monthrange(year, month + 1)[1])
            t = t.replace(year=year, month=month + 1, day=day)
        try:
            out = t + self.time
        except OverflowError:
            return FAR
        return FAR if out.year > 9998 else out


def parse_duration(path: str, text: str) -> Duration:
    """Parse an OpenADR (ISO 8601) duration such as ``PT15M``, ``P1D``, ``P9999Y``."""
    m = re.fullmatch(DURATION_PATTERN, text)
    if m is None:
        raise InputError(
            path,
            f"{text!r} is not an ISO 8601 duration such as PT1H or P1DT12H: at least one "
            "number (ASCII digits) with its unit, and one after T when T is written",
        )
    neg, years, months, days, unit, hours, minutes, seconds = m.groups()
    if neg:
        raise InputError(path, f"must not be negative, got {text!r}")
    n_days = int(days or 0) * (7 if unit == "W" else 1)
    try:
        time = timedelta(
            days=n_days,
            hours=int(hours or 0),
            minutes=int(minutes or 0),
            seconds=float(seconds or 0),
        )
    except OverflowError:
        raise InputError(path, f"{text!r} is too long") from None
    return Duration(int(years or 0) * 12 + int(months or 0), time)


def parse_event(event: OadrEvent | Mapping[str, Any]) -> OadrEvent:
    """The event as a model; a plain mapping is validated, errors name ``event.<field>``."""
    if isinstance(event, OadrEvent):
        return event
    try:
        return OadrEvent.model_validate(event)
    except ValidationError as e:
        err = e.errors()[0]
        loc = "event"
        for p in err.get("loc", ()):
            loc += f"[{p}]" if isinstance(p, int) else f".{p}"
        reason = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        raise InputError(loc, reason) from None
