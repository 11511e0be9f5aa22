"""Add the speculative draft depth to the silicon runs that used MTP: the draft tokens
each decode iteration verifies beyond its own, as the published launch scripts and
recipes state them (docs/validation-silicon.md, section 3, "Speculative decoding").

The two derived files list the runs measured with DeepSeek's multi-token prediction
(``model/data/silicon_speculative.json``: aggregated rows whose every matching
InferenceX entry states ``spec-decoding: mtp``; ``model/data/silicon_disagg_workers.json``:
disaggregated records whose srt-slurm recipe runs it). This script adds each one's
depth, ``draft_tokens``, and where it was read (``draft_source``):

1. Aggregated rows: the entry's launch script, ``benchmarks/single_node/<entry>.sh``
   or ``benchmarks/<entry>.sh`` (before February 2026 ``benchmarks/<entry>_slurm.sh``
   or ``_docker.sh``; the entry's name with ``-`` as ``_``; SGLang's
   scripts drop the framework: ``dsr1-fp8-b200-sglang-mtp`` runs
   ``dsr1_fp8_b200_mtp.sh``), as committed at the row's run (the last first-parent
   commit of InferenceX main at most 15 minutes before its ``measured=`` time; a
   date alone: every state of that day and the last before it). TensorRT-LLM scripts
   set ``MTP=N`` (``num_nextn_predict_layers``), overridden inside ``if [[
   "$DP_ATTENTION" == "true" ]]``: the branch the row's attention DP takes is read.
   SGLang scripts set ``SPECULATIVE_NUM_STEPS`` with ``SPECULATIVE_EAGLE_TOPK=1`` (a
   chain) and ``SPECULATIVE_DRAFT_TOKENS`` = steps + 1: the depth is the steps.
2. Disaggregated records: the decode worker's section of the recipe, at the commits
   the record names: TensorRT-LLM's ``speculative_config.num_nextn_predict_layers``,
   SGLang's ``speculative-num-steps`` (with ``speculative-eagle-topk`` 1).

A row or record takes a depth only when every version read states the same one; else
it gets none and stays unpredicted with the reason. Nothing here is fitted to a
measurement: the files hold stated configuration only.

    python scripts/derive_silicon_draft_tokens.py --inferencex GITDIR --srt-slurm GITDIR \
        [--silicon FILE]

``GITDIR``: clones (bare or not) of github.com/SemiAnalysisAI/InferenceX and
github.com/NVIDIA/srt-slurm. Run it after ``derive_silicon_speculative.py`` and
``derive_silicon_disagg_workers.py``, which write the files without the depth.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from model.measured.silicon import installed_silicon, read_silicon, recipe_parallelism

sys.path.insert(0, str(Path(__file__).resolve().parent))
from derive_silicon_disagg_workers import (  # noqa: E402
    Repo,
    dump,
    main_commits,
    measured,
    run_commits,
)

DATA = Path(__file__).resolve().parents[1] / "model" / "data"
SPECULATIVE = DATA / "silicon_speculative.json"
WORKERS = DATA / "silicon_disagg_workers.json"
_DP_IF = re.compile(r'^\s*if \[\[ "\$DP_ATTENTION" == "true" \]\]; then\s*$')


def script_paths(entry: str) -> list[str]:
    """The launch scripts an aggregated entry may run (rule 1)."""
    names = [entry.replace("-", "_")]
    if "-sglang-" in entry:
        names.append(entry.replace("-sglang", "").replace("-", "_"))
    return [f"benchmarks/{d}{n}{s}.sh" for n in names for d, s in
            (("single_node/", ""), ("", ""), ("", "_slurm"), ("", "_docker"))]  # fmt: skip


def trt_depth(text: str, dp_attention: bool) -> int | None:
    """``MTP=N`` of a TensorRT-LLM launch script on the row's branch (rule 1)."""
    default = branch = None
    state = ""  # "", "then", "else": where in the DP_ATTENTION block a line is
    for line in text.splitlines():
        if _DP_IF.match(line):
            state = "then"
            continue
        if state and re.match(r"^\s*else\s*$", line):
            state = "else"
            continue
        if state and re.match(r"^\s*fi\s*$", line):
            state = ""
            continue
        m = re.match(r"^\s*MTP=(\d+)\s*$", line)
        if not m:
            continue
        value = int(m.group(1))
        if not state:
            default = value
        elif (state == "then") == dp_attention:
            branch = value
    return branch if branch is not None else default


def sglang_depth(text: str) -> int | None:
    """The EAGLE chain's steps of an SGLang launch script (rule 1)."""

    def var(name: str) -> int | None:
        m = re.search(rf"^\s*{name}=(\d+)\s*$", text, re.M)
        return int(m.group(1)) if m else None

    steps, topk, tokens = (var("SPECULATIVE_NUM_STEPS"), var("SPECULATIVE_EAGLE_TOPK"),
                           var("SPECULATIVE_DRAFT_TOKENS"))  # fmt: skip
    if steps is None or topk != 1 or tokens != steps + 1:
        return None
    return steps


def recipe_depth(doc: Any) -> int | None:
    """The decode worker's draft depth of an srt-slurm recipe (rule 2)."""
    found: list[int] = []

    def walk(node: Any, in_decode: bool) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                dec = in_decode or k == "decode"
                if dec and k == "speculative_config" and isinstance(v, dict):
                    n = v.get("num_nextn_predict_layers")
                    if n is not None:
                        found.append(int(n))
                if (
                    dec
                    and k == "speculative-num-steps"
                    and int(node.get("speculative-eagle-topk", 1)) == 1
                ):
                    found.append(int(v))
                walk(v, dec)
        elif isinstance(node, list):
            for v in node:
                walk(v, in_decode)

    walk(doc, False)
    return found[0] if found and len(set(found)) == 1 else None


def aggregated(ix: Repo, rows: dict[str, Any], counts: Counter[str]) -> None:
    spec = json.loads(SPECULATIVE.read_text(encoding="utf-8"))
    commits = main_commits(ix)
    for rid, entry in spec["rows"].items():
        entry.pop("draft_tokens", None)
        entry.pop("draft_source", None)
        if entry["kind"] != "speculative":
            continue
        row = rows.get(rid)
        if row is None or len(entry["entries"]) != 1:
            counts["agg: not one entry"] += 1
            continue
        read = recipe_parallelism(row)
        agg = (read[0] if read else row).agg
        dp = agg is not None and agg.dp > 1
        depths: set[int | None] = set()
        sources: list[str] = []
        for sha in run_commits(commits, measured(row)):
            for path in script_paths(entry["entries"][0]):
                text = ix.git("show", f"{sha}:{path}")
                if not text:
                    continue
                depth = (
                    sglang_depth(text) if "sglang" in entry["entries"][0] else trt_depth(text, dp)
                )
                depths.add(depth)
                sources.append(f"{path} at {sha[:12]}")
                break
        if len(depths) == 1 and None not in depths:
            entry["draft_tokens"] = depths.pop()
            entry["draft_source"] = "; ".join(sorted(set(sources)))
            counts[f"agg: depth {entry['draft_tokens']}"] += 1
        else:
            counts["agg: no single depth"] += 1
    SPECULATIVE.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")


def disaggregated(srt: Repo, counts: Counter[str]) -> None:
    workers = json.loads(WORKERS.read_text(encoding="utf-8"))
    for rec in workers["records"]:
        rec.pop("draft_tokens", None)
        rec.pop("draft_source", None)
        if rec["speculative"] != "mtp":
            continue
        if not rec["recipe"]:
            counts["disagg: no recipe"] += 1
            continue
        depths = {recipe_depth(srt.yaml_at(c, rec["recipe"])) for c in rec["recipe_commits"]}
        if len(depths) == 1 and None not in depths:
            rec["draft_tokens"] = depths.pop()
            rec["draft_source"] = (
                f"srt-slurm {rec['recipe']} ({', '.join(rec['recipe_commits'])}), decode worker"
            )
            counts[f"disagg: depth {rec['draft_tokens']}"] += 1
        else:
            counts["disagg: no single depth"] += 1
    WORKERS.write_text(dump(workers), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inferencex", required=True, metavar="GITDIR")
    ap.add_argument("--srt-slurm", required=True, metavar="GITDIR")
    ap.add_argument("--silicon", default=None, metavar="FILE")
    args = ap.parse_args(argv)
    path = args.silicon or installed_silicon()
    if path is None:
        ap.error("--silicon: no file given and aiconfigurator-core is not installed")
    rows = {r.id: r for r in read_silicon(path)}
    counts: Counter[str] = Counter()
    aggregated(Repo(args.inferencex), rows, counts)
    disaggregated(Repo(args.srt_slurm), counts)
    print(json.dumps(dict(sorted(counts.items()))), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
