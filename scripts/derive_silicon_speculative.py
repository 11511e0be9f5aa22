"""Derive model/data/silicon_speculative.json: the aggregated rows of AIConfigurator's
silicon file that were measured with speculative decoding, from the public InferenceX
benchmark configurations (docs/validation-silicon.md, section 3).

The aggregated rows of SemiAnalysis InferenceX runs name the container image they ran
(``image=`` in ``silicon_data_source``) but not whether the server drafted tokens with
DeepSeek's multi-token prediction (MTP). InferenceX states it per search-space point of
``.github/configs/nvidia-master.yaml`` (``spec-decoding: mtp``), and its MTP entries
have run images of their own (e.g. TensorRT-LLM ``1.2.0rc6.post3`` for DeepSeek-R1 on
B200, where the entries without MTP ran ``1.2.0rc6.post2``). The rule, for each
aggregated row that names an image:

1. The entries of every state of that file on InferenceX's main branch (first-parent
   history) with ``disagg`` false and the row's model prefix, precision, framework
   (``trt`` for trtllm), GPU (the runner's first word) and image, and a search-space
   point at the row's ISL and OSL whose ``tp`` is the row's attention TP x attention DP
   (the row as read: a single-node recipe's TP x EP recorded as its ``tp_size`` is read
   as the recipe, ``model.measured.silicon.recipe_parallelism``),
   whose ``ep`` (1 when absent) is the row's ``moe_ep_size``, whose ``dp-attn`` is the
   row's (attention DP above 1) and whose concurrencies (``conc-start``..``conc-end``
   or ``conc-list``) include the row's.
2. Every matching point states MTP: the row ran MTP and is listed (``speculative``).
   Some do and some do not: the row does not say which and is listed (``ambiguous``),
   as the disaggregated rows in that case are (scripts/derive_silicon_disagg_workers.py).
   None does, or no point matches: the row is not listed.

The model composes no speculative decoding, so a listed row is left unpredicted with
its reason. Nothing here is fitted to a measurement: the file holds stated
configuration only.

    python scripts/derive_silicon_speculative.py --inferencex GITDIR [--silicon FILE] \
        [--out model/data/silicon_speculative.json]

``GITDIR``: a clone (bare or not) of github.com/SemiAnalysisAI/InferenceX.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from model.measured.silicon import SiliconRow, installed_silicon, read_silicon, recipe_parallelism

sys.path.insert(0, str(Path(__file__).resolve().parent))
from derive_silicon_disagg_workers import GPU, MASTER, PREFIX, Repo  # noqa: E402

#: the row's backend -> InferenceX's aggregated framework
FRAMEWORK = {"trtllm": "trt", "sglang": "sglang", "vllm": "vllm"}
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "model" / "data" / "silicon_speculative.json"


@dataclass(frozen=True)
class Point:
    """One search-space point of an aggregated entry of the file."""

    key: str  # the entry's name
    commit: str  # a main-branch commit whose file holds it
    prefix: str
    precision: str
    framework: str
    gpu: str
    image: str
    isl: int
    osl: int
    tp: int
    ep: int
    dp_attn: bool
    conc: tuple[int, ...] | tuple[int, int]  # the list, or (start, end) when ranged
    ranged: bool
    spec: str  # none, mtp, ...


def image_of(row: SiliconRow) -> str:
    """The container image the row names (``#`` read as ``/``), or empty."""
    m = re.search(r"image=([^;]+)", row.source)
    return m.group(1).strip().replace("#", "/") if m else ""


def points(doc: Any, commit: str) -> list[Point]:
    """The aggregated search-space points of one state of the file."""
    out = []
    for key, c in (doc or {}).items() if isinstance(doc, dict) else ():
        if not isinstance(c, dict) or c.get("disagg"):
            continue
        head = (str(c.get("model-prefix")), str(c.get("precision")), str(c.get("framework")),
                str(c.get("runner", "")).split("-")[0],
                str(c.get("image", "")).replace("#", "/"))  # fmt: skip
        for s in c.get("seq-len-configs") or []:
            for e in s.get("search-space") or []:
                if not isinstance(e, dict) or "tp" not in e:
                    continue
                listed = e.get("conc-list")
                if listed:
                    conc: tuple[int, ...] = tuple(int(x) for x in listed)
                elif e.get("conc-start") is not None and e.get("conc-end") is not None:
                    conc = (int(e["conc-start"]), int(e["conc-end"]))
                else:
                    continue
                out.append(Point(str(key), commit, *head, int(s.get("isl") or 0),
                                 int(s.get("osl") or 0), int(e["tp"]), int(e.get("ep") or 1),
                                 bool(e.get("dp-attn")), conc, not listed,
                                 str(e.get("spec-decoding") or "none")))  # fmt: skip
    return out


def matches(row: SiliconRow, p: Point) -> bool:
    """Whether the point is the row's (step 1 of the rule)."""
    a = row.agg
    if a is None or row.concurrency is None:
        return False
    if (p.prefix, p.precision, p.framework, p.gpu, p.image) != (
        PREFIX.get(row.model_path), row.precision, FRAMEWORK.get(row.backend),
        GPU.get(row.system), image_of(row),
    ):  # fmt: skip
        return False
    if (p.isl, p.osl, p.tp, p.ep, p.dp_attn) != (row.isl, row.osl, a.tp * a.dp, a.moe_ep,
                                                 a.dp > 1):  # fmt: skip
        return False
    if p.ranged:
        return p.conc[0] <= row.concurrency <= p.conc[1]
    return row.concurrency in p.conc


def classify(row: SiliconRow, pts: Iterable[Point]) -> tuple[str, list[Point]]:
    """``speculative``, ``ambiguous``, ``none`` or ``unmatched`` (step 2), with the
    matching points."""
    found = [p for p in pts if matches(row, p)]
    kinds = {p.spec != "none" for p in found}
    if not found:
        return "unmatched", found
    if kinds == {True}:
        return "speculative", found
    return ("ambiguous" if len(kinds) > 1 else "none"), found


def reason(kind: str, found: Sequence[Point]) -> str:
    """The reason a listed row is left unpredicted."""
    spec = sorted({p.spec.upper() for p in found if p.spec != "none"})
    entries = sorted({p.key for p in found})
    first = sorted({p.commit for p in found})[0][:12]
    what = f"InferenceX nvidia-master.yaml {', '.join(entries)} (e.g. at {first})"
    if kind == "speculative":
        return f"the run used {'/'.join(spec)} speculative decoding ({what}): not expressed"
    return (
        f"{what} ran this image, configuration and concurrency with and without "
        f"{'/'.join(spec)} speculative decoding; the row does not say which"
    )


def derive(ix: Repo, rows: Sequence[SiliconRow]) -> dict[str, Any]:
    log = ix.git("log", "--first-parent", "--format=%H", "HEAD", "--", MASTER).split()
    seen: set[str] = set()
    pts: list[Point] = []
    for sha in log:
        blob = ix.git("rev-parse", f"{sha}:{MASTER}").strip()
        if not blob or blob in seen:
            continue
        seen.add(blob)
        try:
            doc = yaml.load(ix.git("cat-file", "-p", blob), Loader=yaml.CSafeLoader)
        except yaml.YAMLError:
            continue
        pts.extend(points(doc, sha))
    by_head: dict[tuple[str, ...], list[Point]] = {}
    for p in pts:
        by_head.setdefault((p.prefix, p.precision, p.framework, p.gpu), []).append(p)
    listed: dict[str, dict[str, Any]] = {}
    counts: Counter[str] = Counter()
    for row in rows:
        if row.mode != "agg":
            continue
        if not image_of(row):
            counts["no image named"] += 1
            continue
        head = (str(PREFIX.get(row.model_path)), row.precision, str(FRAMEWORK.get(row.backend)),
                str(GPU.get(row.system)))  # fmt: skip
        recipe = recipe_parallelism(row)
        kind, found = classify(row if recipe is None else recipe[0], by_head.get(head, []))
        counts[kind] += 1
        if kind in ("speculative", "ambiguous"):
            listed[row.id] = {
                "kind": kind,
                "entries": sorted({p.key for p in found}),
                "image": image_of(row),
                "reason": reason(kind, found),
                "match": {"model_path": row.model_path, "system": row.system,
                          "backend": row.backend, "precision": row.precision,
                          "isl": row.isl, "osl": row.osl},  # fmt: skip
            }
    return {
        "source": {
            "description": (
                "Aggregated rows of AIConfigurator's silicon_sample.csv measured with "
                "speculative decoding, or with and without it, by the public InferenceX "
                "configurations of the image they name. Derived by "
                "scripts/derive_silicon_speculative.py; see its docstring and "
                "docs/validation-silicon.md, section 3."
            ),
            "inferencex": {
                "repository": "https://github.com/SemiAnalysisAI/InferenceX",
                "file": MASTER,
                "snapshot": ix.head(),
                "states_read": len(seen),
            },
        },
        "counts": dict(sorted(counts.items())),
        "rows": dict(sorted(listed.items())),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inferencex", required=True, metavar="GITDIR")
    ap.add_argument("--silicon", default=None, metavar="FILE")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    path = args.silicon or installed_silicon()
    if path is None:
        ap.error("--silicon: no file given and aiconfigurator-core is not installed")
    out = derive(Repo(args.inferencex), read_silicon(path))
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(out["counts"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
