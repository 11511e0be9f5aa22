"""Phases on different GPU types against one type (docs/mixed-gpus.md, section 5).

Prints, for Llama 3.1 70B at tp4 instances under SPEC's rooflines and the admission
variant: (1) H100 prefill with H200 decode against all-H100 and all-H200, at equal GPU
counts and power budgets; (2) Splitwise's comparison as far as the catalog allows:
H100 prefill with A100-80GB decode against all-A100 and all-H100, at equal power.

    PYTHONPATH=. python3 scripts/mixed_gpus_demo.py
"""

from __future__ import annotations

from typing import Any

from model.operations import SpecRequest, front_report, resolve_spec

MODEL = "llama-3.1-70b"
TP = 4


def best(prefill: str, decode: str, workload: str, max_gpus: int, budget_w: float,
         rate: float) -> dict[str, Any]:  # fmt: skip
    """The most capacity within ``budget_w`` and the least power for ``rate`` of the
    pair's configurations within ``max_gpus``."""
    spec = resolve_spec(
        SpecRequest(MODEL, decode, workload, {"serving": {"tensor_parallel": TP}},
                    prefill_gpu=prefill, decode_gpu=decode, interconnect="infiniband")
    )  # fmt: skip
    rep = front_report(spec, max_gpus, required_rps=rate, budget_w=budget_w)
    return {"most": rep["max_capacity_under_budget"]["config"],
            "least": rep["min_power_for_rate"]["config"]}  # fmt: skip


def line(name: str, r: dict[str, Any], base: dict[str, Any]) -> str:
    m, least = r["most"], r["least"]
    gain = m["capacity_rps"] / base["most"]["capacity_rps"] - 1.0
    saving = 1.0 - least["power_w"] / base["least"]["power_w"] if least else float("nan")
    split = f"{m['n_p']}P{m['n_d']}D ({m['n_p'] * TP}+{m['n_d'] * TP} GPUs)"
    least_txt = (
        f"{least['n_p']}P{least['n_d']}D {least['power_w']:,.0f} W ({saving:+.1%})"
        if least
        else "none"
    )
    return (
        f"  {name:<24} most within budget: {split} {m['capacity_rps']:7.2f} req/s "
        f"({gain:+.1%})   least power for the rate: {least_txt}"
    )


def compare(title: str, pairs: list[tuple[str, str, str]], workload: str, max_gpus: int,
            budget_w: float, rate: float) -> None:  # fmt: skip
    print(f"{title}: {MODEL}, tp{TP} instances, {workload}, <= {max_gpus} GPUs, "
          f"budget {budget_w:,.0f} W, rate {rate:g} req/s")  # fmt: skip
    results = {name: best(p, d, workload, max_gpus, budget_w, rate) for name, p, d in pairs}
    base = results[pairs[0][0]]
    for name, _, _ in pairs:
        print(line(name, results[name], base))


def main() -> None:
    for workload in ("azure-conv-2023", "azure-code-2023"):
        compare(
            "H100 prefill + H200 decode",
            [("all H100", "h100-sxm", "h100-sxm"), ("all H200", "h200", "h200"),
             ("H100 prefill, H200 decode", "h100-sxm", "h200")],  # fmt: skip
            workload, 16, 9_000.0, 8.0,
        )  # fmt: skip
    for workload in ("azure-conv-2023", "azure-code-2023"):
        compare(
            "Splitwise (A100-80GB, H100)",
            [("all A100 (Baseline-A100)", "a100-80gb", "a100-80gb"),
             ("all H100 (Baseline-H100)", "h100-sxm", "h100-sxm"),
             ("H100 P, A100 D (Splitwise-HA)", "h100-sxm", "a100-80gb")],  # fmt: skip
            workload, 64, 20_000.0, 20.0,
        )  # fmt: skip


if __name__ == "__main__":
    main()
