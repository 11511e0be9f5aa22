"""Derive model/data/silicon_disagg_workers.json: the worker configuration of the
disaggregated rows of AIConfigurator's silicon file that leave their worker counts
empty, from the public InferenceX benchmark configurations (docs/validation-silicon.md,
section 3).

Those rows are SemiAnalysis InferenceX runs of NVIDIA Dynamo deployments. Each run was
started by a push to InferenceX's main branch; its configuration is the entry of
``.github/configs/nvidia-master.yaml`` at that commit, and most entries name an
srt-slurm recipe (``CONFIG_FILE=``) that states what the workers ran. The rule, in
order, for each row without ``prefill_num_workers`` / ``decode_num_workers``:

1. The run's commit: the last first-parent commit of InferenceX's main branch at most
   15 minutes before the row's ``measured=`` time; for a ``measured=`` date without a
   time, every state of the file that day (before its first commit and after each).
2. The entries of that file with ``disagg: true`` and the row's model prefix,
   precision, GPU (the runner's first word), framework (``dynamo-trt`` for trtllm,
   ``dynamo-sglang`` for sglang), ISL and OSL, whose prefill ``tp`` and ``ep`` and
   decode ``tp`` are the row's ``prefill_tp_size``, ``prefill_moe_ep_size`` and
   ``decode_tp_size`` (the row's other per-phase columns do not carry the entry's
   attention-DP flag or decode EP), and whose concurrencies include the row's: the
   entry's ``conc-list``, or the benchmark concurrencies of its recipe.
3. The recipe as stored in NVIDIA/srt-slurm (the repository the runs cloned, as
   ishandhanani/srt-slurm, branch ``sa-submission-q1-2026``, squash-merged into its main
   branch on 2026-03-03): its last version committed before the run and its first
   after. A value both versions state is taken; one they disagree on is not (a batch
   limit is then left unstated; workers, parallelism or speculative decoding that
   differ make the entry unusable). The recipe's worker counts and speculative
   decoding must be the entry's.
4. A row matches when every matching entry (over the day's states) gives the same
   configuration; else it is ambiguous and refused with the candidates.

Nothing in the output is fitted to a measurement: it holds only stated configuration.

    python scripts/derive_silicon_disagg_workers.py --inferencex GITDIR \
        --srt-slurm GITDIR [--silicon FILE] [--out model/data/silicon_disagg_workers.json]

``GITDIR``: a clone (bare or not) of github.com/SemiAnalysisAI/InferenceX and of
github.com/NVIDIA/srt-slurm.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from model.measured.silicon import SiliconRow, installed_silicon, read_silicon

MASTER = ".github/configs/nvidia-master.yaml"
#: the row's model_path -> InferenceX's model prefix
PREFIX = {
    "deepseek-ai/DeepSeek-R1": "dsr1",
    "openai/gpt-oss-120b": "gptoss",
    "moonshotai/Kimi-K2.5": "kimik2.5",
    "zhipuai/GLM-5": "glm5",
}
#: the row's system -> InferenceX's GPU (a runner's first word)
GPU = {"b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200", "gb300": "gb300",
       "h100_sxm": "h100", "h200_sxm": "h200"}  # fmt: skip
FRAMEWORK = {"trtllm": "dynamo-trt", "sglang": "dynamo-sglang"}
#: a run starts within this many seconds of its commit
RUN_WINDOW_S = 900


class Repo:
    def __init__(self, path: str) -> None:
        self.path = path

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", self.path, *args], capture_output=True, text=True, check=False
        )
        return done.stdout

    @functools.cache  # noqa: B019 - one instance per run
    def yaml_at(self, commit: str, path: str) -> Any:
        text = self.git("show", f"{commit}:{path}")
        return yaml.safe_load(text) if text else None

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()


def when(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def measured(row: SiliconRow) -> str:
    m = re.search(r"measured=([^;]+)", row.source)
    return m.group(1).strip() if m else ""


# --------------------------------------------------------------------------
# InferenceX


def main_commits(ix: Repo) -> list[tuple[str, dt.datetime]]:
    out = []
    for line in ix.git("log", "--first-parent", "--format=%H %cI", "HEAD").splitlines():
        sha, t = line.split()
        out.append((sha, when(t)))
    return out


def run_commits(commits: list[tuple[str, dt.datetime]], stamp: str) -> list[str]:
    """The commits whose configuration the run at ``stamp`` read (newest first)."""
    if not stamp:
        return []
    t = when(stamp)
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}T00:00:00(\.0+)?Z", stamp):
        day = t.date()
        on = [s for s, c in commits if c.astimezone(dt.UTC).date() == day]
        before = [s for s, c in commits if c.astimezone(dt.UTC).date() < day][:1]
        return on + before
    near = [s for s, c in commits if c <= t and (t - c).total_seconds() <= RUN_WINDOW_S]
    return near[:1]


def settings(phase: dict[str, Any]) -> dict[str, str]:
    out = {}
    for s in phase.get("additional-settings") or []:
        k, _, v = str(s).partition("=")
        out[k] = v
    return out


def entries(ix: Repo, commit: str, row: SiliconRow) -> list[dict[str, Any]]:
    doc = ix.yaml_at(commit, MASTER) or {}
    prefix, gpu = PREFIX.get(row.model_path), GPU.get(row.system)
    out = []
    for key, c in doc.items():
        if not isinstance(c, dict) or not c.get("disagg"):
            continue
        if (c.get("model-prefix"), c.get("precision"), c.get("framework")) != (
            prefix,
            row.precision,
            FRAMEWORK.get(row.backend),
        ) or str(c.get("runner", "")).split("-")[0] != gpu:
            continue
        for s in c.get("seq-len-configs") or []:
            if (s.get("isl"), s.get("osl")) != (row.isl, row.osl):
                continue
            for e in s.get("search-space") or []:
                out.append({"key": key, "commit": commit, "framework": c.get("framework"),
                            "spec": e.get("spec-decoding", "none"),
                            "conc": list(e.get("conc-list") or []), "P": e["prefill"],
                            "D": e["decode"]})  # fmt: skip
    return out


# --------------------------------------------------------------------------
# srt-slurm recipes


def moe_a2a(engine: dict[str, Any]) -> str:
    """An SGLang phase's MoE all-to-all: ``deepep_ll`` or ``deepep_normal`` for
    ``moe-a2a-backend: deepep`` in ``deepep-mode`` ``low_latency`` or ``normal``
    (``deepep_auto`` for another mode), else ``""`` (the engine's collectives)."""
    if str(engine.get("moe-a2a-backend") or "") != "deepep":
        return ""
    mode = str(engine.get("deepep-mode") or "auto")
    return {"low_latency": "deepep_ll", "normal": "deepep_normal"}.get(mode, "deepep_auto")


def _whole(value: Any) -> int | None:
    """A recipe's whole number, None where it states none (or a list, a sweep's)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def recipe_facts(doc: dict[str, Any]) -> dict[str, Any]:
    """What a recipe states of a run: benchmark, workers and each phase's engine."""
    bench = doc.get("benchmark") or {}
    c = bench.get("concurrencies")
    concs = ([int(x) for x in c] if isinstance(c, list)
             else [int(x) for x in re.split(r"[x,]", str(c)) if x.strip()])  # fmt: skip
    res = doc.get("resources") or {}
    be = doc.get("backend") or {}
    out: dict[str, Any] = {"isl": bench.get("isl"), "osl": bench.get("osl"), "conc": concs}
    if "trtllm_config" in be and "prefill" in be["trtllm_config"]:
        out["engine"] = "trtllm"
        for ph in ("prefill", "decode"):
            e = be["trtllm_config"][ph]
            gpus = int(e.get("tensor_parallel_size") or 1)
            out[ph] = {
                "workers": res.get(f"{ph}_workers"),
                "gpus": gpus,
                "attention_dp": gpus if e.get("enable_attention_dp") else 1,
                "moe_ep": int(e.get("moe_expert_parallel_size") or 1),
                "max_batch_size": e.get("max_batch_size"),
                "max_num_tokens": e.get("max_num_tokens"),
                "speculative": bool(e.get("speculative_config")),
                "moe_a2a": "",
                "expert_slots": _whole(
                    ((e.get("moe_config") or {}).get("load_balancer") or {}).get("num_slots")
                ),
            }
    elif "sglang_config" in be and "prefill" in be["sglang_config"]:
        out["engine"] = "sglang"
        for ph in ("prefill", "decode"):
            e = be["sglang_config"][ph]
            gpus = int(e.get("tensor-parallel-size") or e.get("tp-size") or 1)
            dp = int(e.get("data-parallel-size") or e.get("dp-size") or 1)
            out[ph] = {
                "workers": res.get(f"{ph}_workers"),
                "gpus": gpus,
                "attention_dp": dp if e.get("enable-dp-attention") else 1,
                "moe_ep": int(e.get("expert-parallel-size") or e.get("ep-size") or 1),
                "max_batch_size": None,  # max-running-requests: per server, not per rank
                "max_num_tokens": None,
                "speculative": bool(e.get("speculative-algorithm")),
                "moe_a2a": moe_a2a(e),
                "redundant_experts": _whole(e.get("ep-num-redundant-experts")),
            }
    else:
        out["engine"] = "aggregated" if "sglang_config" in be else "unknown"
    return out


@functools.cache
def recipe_bracket(sr: Repo, path: str, at: dt.datetime) -> list[tuple[str, dict[str, Any]]]:
    """The recipe's last stored version committed before ``at`` and its first after
    (versions that add or change the file; a later removal from the main branch says
    nothing of the branch the runs read)."""
    versions = []
    log = sr.git("log", "--format=%H %cI", "--diff-filter=AM", "HEAD", "--", path)
    for line in log.splitlines():
        sha, t = line.split()
        versions.append((sha, when(t)))
    before = [v for v in versions if v[1] <= at][:1]
    after = [v for v in versions if v[1] > at][-1:]
    out = []
    for sha, _ in before + after:
        doc = sr.yaml_at(sha, path)
        if isinstance(doc, dict):
            out.append((sha, recipe_facts(doc)))
    return out


# --------------------------------------------------------------------------
# One entry's configuration


PHASE_KEYS = ("workers", "gpus", "attention_dp", "moe_ep", "moe_a2a")


def entry_config(sr: Repo, e: dict[str, Any], at: dt.datetime) -> dict[str, Any]:
    """The entry's configuration (``record``) and concurrencies, or why it is unusable
    (``reason``)."""
    p_set, d_set = settings(e["P"]), settings(e["D"])
    files = [v for k, v in {**p_set, **d_set}.items() if k == "CONFIG_FILE"]
    spec = "none" if e["spec"] in ("none", "", None) else str(e["spec"])
    where = e["key"]
    base = {"config": e["key"], "speculative": spec}
    if not files:
        if e["framework"] == FRAMEWORK["sglang"]:
            return {
                "conc": e["conc"],
                "reason": (
                    f"{where} sets the workers' parallelism through its launch script's mode "
                    f"({p_set.get('SCRIPT_MODE') or 'nodes per worker'}), not in the entry"
                ),
            }
        phases = {}
        for ph, s, tag in (("prefill", e["P"], "PREFILL"), ("decode", e["D"], "DECODE")):
            env = settings(s)
            gpus = int(s["tp"])
            phases[ph] = {
                "workers": int(s["num-worker"]),
                "gpus": gpus,
                "attention_dp": gpus if s.get("dp-attn") else 1,
                "moe_ep": int(s.get("ep") or 1),
                "max_batch_size": int(env[f"{tag}_MAX_BATCH_SIZE"])
                if f"{tag}_MAX_BATCH_SIZE" in env
                else None,
                "max_num_tokens": int(env[f"{tag}_MAX_NUM_TOKENS"])
                if f"{tag}_MAX_NUM_TOKENS" in env
                else None,
                "moe_a2a": "",
            }
        if spec == "none" and d_set.get("DECODE_MTP_SIZE", "0") not in ("0", ""):
            spec = "mtp"
        return {"conc": e["conc"], "record": {**base, "speculative": spec, "recipe": None,
                                               **phases}}  # fmt: skip
    path = files[0]
    versions = recipe_bracket(sr, path, at)
    if not versions:
        return {"conc": e["conc"], "reason": f"{where} names {path}, not in srt-slurm"}
    conc = sorted(set(e["conc"]).union(*(set(f["conc"]) for _, f in versions)))
    if any(f["engine"] == "aggregated" for _, f in versions):
        return {"conc": conc, "reason": f"{where} names {path}, an aggregated deployment"}
    if any(f["engine"] == "unknown" for _, f in versions):
        return {"conc": conc, "reason": f"{where} names {path}, which states no workers"}
    phases = {}
    for ph, s in (("prefill", e["P"]), ("decode", e["D"])):
        stated = [f[ph] for _, f in versions]
        if {f["workers"] for f in stated} != {int(s["num-worker"])}:
            return {"conc": conc, "reason": f"{where}: {path} states other {ph} workers"}
        if len({tuple(f[k] for k in PHASE_KEYS) for f in stated}) > 1:
            return {"conc": conc, "reason": f"{path} changed its {ph} parallelism"}
        one = {k: stated[0][k] for k in PHASE_KEYS}
        for k in ("max_batch_size", "max_num_tokens"):
            values = {f[k] for f in stated}
            one[k] = values.pop() if len(values) == 1 else None
        for k in ("expert_slots", "redundant_experts"):  # kept only where stated alike
            values = {f.get(k) for f in stated}
            if len(values) == 1 and (value := values.pop()) is not None:
                one[k] = value
        phases[ph] = one
    recipe_spec = {f["decode"]["speculative"] for _, f in versions}
    if recipe_spec != {spec != "none"}:
        return {"conc": conc, "reason": f"{where}: {path} disagrees on speculative decoding"}
    record = {**base, "recipe": path, "recipe_commits": [sha for sha, _ in versions], **phases}
    return {"conc": conc, "record": record}


def summary(rec: dict[str, Any]) -> str:
    def one(p: dict[str, Any]) -> str:
        kind = ("d" if p["attention_dp"] > 1 else "t") + ("ep" if p["moe_ep"] > 1 else "p")
        return f"{p['workers']}x {kind}{p['gpus']}"

    spec = "" if rec["speculative"] == "none" else f", {rec['speculative'].upper()}"
    return f"{one(rec['prefill'])} prefill / {one(rec['decode'])} decode{spec}"


# --------------------------------------------------------------------------
# Rows


def derive(ix: Repo, sr: Repo, rows: list[SiliconRow]) -> dict[str, Any]:
    commits = main_commits(ix)
    stamp_of = dict(commits)
    records: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    matched: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for row in rows:
        if row.mode != "disagg" or row.prefill is None or row.decode is None:
            continue
        if row.prefill.workers is not None and row.decode.workers is not None:
            continue
        stamp = measured(row)
        shas = run_commits(commits, stamp)
        group = (
            f"{PREFIX.get(row.model_path, row.model_path)} {row.precision} "
            f"{GPU.get(row.system, row.system)} {FRAMEWORK.get(row.backend, row.backend)}"
        )
        if not shas:
            counts["refused: no InferenceX run"] += 1
            refused[row.id] = (
                f"no run of InferenceX's main branch at measured={stamp or '?'}"
                " (no commit within 15 minutes before it)"
            )
            continue
        found: dict[str, dict[str, Any]] = {}
        reasons: dict[str, str] = {}
        seen_any = seen_conc = False
        for sha in shas:
            at = stamp_of[sha] if len(shas) == 1 else when(stamp) + dt.timedelta(days=1)
            for e in entries(ix, sha, row):
                seen_any = True
                p, d = e["P"], e["D"]
                cfg = entry_config(sr, e, at)
                if row.concurrency not in cfg["conc"]:
                    continue
                seen_conc = True
                if (int(p["tp"]), int(p.get("ep") or 1), int(d["tp"])) != (
                    row.prefill.tp,
                    row.prefill.moe_ep,
                    row.decode.tp,
                ):
                    continue
                if "reason" in cfg:
                    reasons[cfg["reason"]] = cfg["reason"]
                    continue
                rec = cfg["record"]
                facts = ("speculative", "prefill", "decode")
                key = json.dumps({k: rec[k] for k in facts}, sort_keys=True)
                prev = found.setdefault(key, {**rec, "inferencex_commits": []})
                if sha not in prev["inferencex_commits"]:
                    prev["inferencex_commits"].append(sha)
                for c in rec.get("recipe_commits") or []:
                    prev.setdefault("recipe_commits", [])
                    if c not in prev["recipe_commits"]:
                        prev["recipe_commits"].append(c)
        where = f"InferenceX {shas[0][:12]}" + (f" and {len(shas) - 1} more of that day"
                                               if len(shas) > 1 else "")  # fmt: skip
        if not seen_any:
            counts["refused: no entry for the model, GPU, framework, lengths"] += 1
            refused[row.id] = f"no disaggregated {group} {row.isl}x{row.osl} entry in {where}"
        elif not seen_conc:
            counts["refused: no entry at the concurrency"] += 1
            refused[row.id] = (
                f"no {group} {row.isl}x{row.osl} entry of {where} runs "
                f"concurrency {row.concurrency}"
            )
        elif not found and not reasons:
            counts["refused: no entry with the row's parallelism"] += 1
            refused[row.id] = (
                f"no {group} {row.isl}x{row.osl} entry of {where} at concurrency "
                f"{row.concurrency} has the row's prefill tp {row.prefill.tp} ep "
                f"{row.prefill.moe_ep}, decode tp {row.decode.tp}"
            )
        elif (
            len(found) > 1
            and not reasons
            and len({summary(r).removesuffix(", MTP") for r in found.values()}) == 1
            and len({r["speculative"] for r in found.values()}) > 1
        ):
            counts["refused: same workers with and without MTP"] += 1
            refused[row.id] = (
                f"{where} ran {group} {row.isl}x{row.osl} at concurrency {row.concurrency} "
                f"on the same workers ({summary(next(iter(found.values()))).removesuffix(', MTP')})"
                " with and without MTP speculative decoding; the row does not say which"
            )
        elif len(found) + len(reasons) > 1:
            options = sorted({summary(r) for r in found.values()} | set(reasons))
            counts["refused: ambiguous"] += 1
            refused[row.id] = (
                f"ambiguous: {len(options)} {group} entries of {where} match "
                f"(concurrency {row.concurrency}): " + "; ".join(options)
            )
        elif reasons:
            counts["refused: entry does not state the configuration"] += 1
            refused[row.id] = f"{next(iter(reasons))} ({where})"
        else:
            rec = next(iter(found.values()))
            rec = dict(next(iter(found.values())))
            runs = rec.pop("inferencex_commits")
            rec["recipe_commits"] = sorted(rec.get("recipe_commits") or [])
            rec["match"] = {"model_path": row.model_path, "system": row.system,
                            "backend": row.backend, "precision": row.precision,
                            "isl": row.isl, "osl": row.osl}  # fmt: skip
            key = json.dumps(rec, sort_keys=True)
            if key not in index:
                index[key] = len(records)
                records.append(rec)
            matched[row.id] = {"record": index[key], "inferencex_commits": runs}
            counts[
                "matched: "
                + (
                    "no speculative decoding"
                    if rec["speculative"] == "none"
                    else "speculative decoding"
                )
            ] += 1
    full: dict[str, dict[str, str]] = {"inferencex": {}, "srt-slurm": {}}
    # commits cited by their first 12 digits, listed once in full
    for rec in records:
        full["srt-slurm"].update((c[:12], c) for c in rec["recipe_commits"])
        rec["recipe_commits"] = [c[:12] for c in rec["recipe_commits"]]
    for m in matched.values():
        full["inferencex"].update((c[:12], c) for c in m["inferencex_commits"])
        m["inferencex_commits"] = [c[:12] for c in m["inferencex_commits"]]
    return {
        "counts": dict(sorted(counts.items())),
        "commits": full,
        "records": records,
        "rows": matched,
        "refused": refused,
    }


def dump(doc: dict[str, Any]) -> str:
    """The document as JSON: its source indented, then one record, row or reason a
    line."""
    parts = [f' "source": {json.dumps(doc["source"], indent=1)}'.replace("\n", "\n ")]
    parts.append(f' "counts": {json.dumps(doc["counts"])}')
    parts.append(f' "commits": {json.dumps(doc["commits"], sort_keys=True)}')
    recs = ",\n".join("  " + json.dumps(r, sort_keys=True) for r in doc["records"])
    parts.append(f' "records": [\n{recs}\n ]')
    for name in ("rows", "refused"):
        items = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}"
                            for k, v in sorted(doc[name].items()))  # fmt: skip
        parts.append(f' "{name}": {{\n{items}\n }}')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inferencex", required=True, help="clone of SemiAnalysisAI/InferenceX")
    parser.add_argument("--srt-slurm", required=True, help="git clone of NVIDIA/srt-slurm")
    parser.add_argument("--silicon", default=None, help="silicon file (default: the installed)")
    parser.add_argument("--out", default="model/data/silicon_disagg_workers.json")
    args = parser.parse_args()
    path = args.silicon or installed_silicon()
    if path is None:
        parser.error("aiconfigurator-core is not installed; give --silicon")
    ix, sr = Repo(args.inferencex), Repo(args.srt_slurm)
    derived = derive(ix, sr, read_silicon(path))
    doc = {
        "source": {
            "description": (
                "Worker configurations of the disaggregated rows of AIConfigurator's "
                "silicon_sample.csv that leave prefill_num_workers / decode_num_workers "
                "empty: SemiAnalysis InferenceX runs of NVIDIA Dynamo deployments. Derived "
                "by scripts/derive_silicon_disagg_workers.py; see its docstring and "
                "docs/validation-silicon.md, section 3."
            ),
            "inferencex": {
                "repository": "https://github.com/SemiAnalysisAI/InferenceX",
                "file": MASTER,
                "snapshot": ix.head(),
            },
            "recipes": {
                "repository": "https://github.com/NVIDIA/srt-slurm",
                "note": "the runs cloned it as ishandhanani/srt-slurm, branch "
                "sa-submission-q1-2026 (squash-merged into main by 5063eb43, 2026-03-03)",
                "snapshot": sr.head(),
            },
            "rule": [
                "run commit: the last first-parent commit of InferenceX main at most 15 "
                "minutes before the row's measured= time; for a measured= date alone, every "
                "state of the file that day",
                "entry: disagg, the row's model prefix, precision, GPU, framework "
                "(dynamo-trt/dynamo-sglang), isl, osl; prefill tp, prefill ep and decode tp "
                "equal to the row's prefill_tp_size, prefill_moe_ep_size, decode_tp_size; "
                "the row's concurrency in the entry's conc-list or its recipe's "
                "concurrencies",
                "recipe (the entry's CONFIG_FILE): its last stored version before the run "
                "and first after; values both state are taken, a batch limit they disagree "
                "on is left out (as are redundant experts or expert slots they disagree "
                "on); its workers and speculative decoding must be the entry's",
                "a row matches when all matching entries give one configuration; else it is "
                "refused with the reason",
            ],
            "fields": {
                "gpus": "GPUs of one worker (the engine's tensor-parallel size)",
                "attention_dp": "attention data-parallel ranks of a worker (1: none)",
                "moe_ep": "MoE expert-parallel size",
                "max_batch_size": "TensorRT-LLM max_batch_size, per attention rank",
                "max_num_tokens": "TensorRT-LLM max_num_tokens, per iteration of a rank",
                "speculative": "the run's speculative decoding (none, mtp)",
                "moe_a2a": "SGLang's MoE all-to-all (moe-a2a-backend deepep: deepep_ll, "
                "deepep_normal or deepep_auto by deepep-mode; empty: the engine's "
                "collectives)",
                "redundant_experts": "SGLang ep-num-redundant-experts: replicas of busy "
                "experts its expert-parallel load balancer adds (absent: none stated)",
                "expert_slots": "TensorRT-LLM moe_config.load_balancer.num_slots: the "
                "expert slots its load balancer holds, routed experts and replicas "
                "(absent: none stated)",
            },
        },
        **derived,
    }
    Path(args.out).write_text(dump(doc))
    for k, v in derived["counts"].items():
        print(f"{v:5d}  {k}")


if __name__ == "__main__":
    main()
