"""GET /v1/catalog: models, GPUs, calibrations and workload presets."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from model.catalog import catalog_summary
from model.workload import presets_summary

router = APIRouter(prefix="/v1", tags=["catalog"])


@router.get("/catalog")
def catalog() -> dict[str, Any]:
    """What the server knows by name; calibrations say whether they were measured."""
    out = dict(catalog_summary())
    out["workloads"] = {
        "presets": presets_summary(),
        "forms": ["fixed:IN:OUT", "<preset name>", "moments (object, HTTP only)"],
    }
    return out
