"""Speculative decoding with a model's own next-token-prediction modules (DeepSeek's
multi-token prediction, MTP): how many tokens a request gains per decode iteration
(docs/kernels.md, "Speculative decoding (DeepSeek's MTP)").

The engines apply the checkpoint's module ``d`` times in a chain to draft ``d`` tokens,
and each decode iteration verifies a request's token and its drafts in one pass of the
model; the request keeps its own token and the longest accepted prefix of the drafts.
With ``p1`` the chance that the first draft is accepted and ``q`` that of each later one
given the earlier were (the model's published acceptance, ``ModelArch.mtp_accept_first``
and ``mtp_accept_next``), the tokens gained per iteration are
``1 + p1 (1 + q + ... + q^(d-1)) = 1 + p1 (1 - q^d) / (1 - q)``. The acceptance is a
property of the text and the model, not of the GPU: it is taken as published, never
fitted to a measured serving run.
"""

from __future__ import annotations

from typing import Any

from model.catalog import ModelArch
from model.errors import InputError


def accepted_tokens(draft: int, first: float, later: float) -> float:
    """Tokens a request gains per decode iteration drafting ``draft`` tokens with
    first-draft acceptance ``first`` and later-draft acceptance ``later``; 1 without
    drafting."""
    if draft <= 0:
        return 1.0
    if later >= 1.0:
        return 1.0 + first * draft
    return 1.0 + first * (1.0 - later**draft) / (1.0 - later)


def model_accepted_tokens(model: ModelArch, draft: int) -> float:
    """:func:`accepted_tokens` at the model's published acceptance."""
    return accepted_tokens(draft, model.mtp_accept_first, model.mtp_accept_next)


def check_draft(model: ModelArch, draft: int, field: str = "mtp_draft_tokens") -> None:
    """``draft`` drafted tokens per iteration are expressible for ``model``: 0, or its
    checkpoint ships a next-token-prediction module and its acceptance is published
    (the catalog's ``mtp_modules``, ``mtp_accept_first``); an InputError naming
    ``field`` otherwise."""
    if draft == 0:
        return
    if not model.mtp_modules:
        raise InputError(
            field, f"{model.name} ships no next-token-prediction (MTP) module to draft with"
        )
    if not model.mtp_accept_first:
        raise InputError(
            field,
            f"{model.name}: no published MTP acceptance in the catalog (model.mtp_accept_first)",
        )


def speculative_record(draft: int, gained: float) -> dict[str, Any]:
    """What an output says of a deployment or a measured run drafting ``draft`` tokens
    per iteration and gaining ``gained`` (``speculative`` in ``pdwatt capacity`` and
    ``pdwatt predict`` JSON)."""
    return {"method": "mtp", "draft_tokens": draft, "tokens_per_iteration": gained}
