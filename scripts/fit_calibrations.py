"""Fit the shipped calibrations (H100 and B200 under vLLM) from the ML.ENERGY
Leaderboard measurements.

Usage:

    python scripts/fit_calibrations.py DATA_DIR [--out FILE] [--check]

DATA_DIR holds the ML.ENERGY per-model JSON files (``DATA_DIR/mlenergy/*.json``, see
their README). The script fits the rows of every (GPU, stack) they cover with
:func:`model.measured.calibrate.fit` (the dense models' rows first, then the mixtures of
experts' for the experts' own terms), without the rows the consistency screen keeps out
(``model.measured.screen``), and writes the calibration document, with the files read
(name and sha256) and the source, to ``model/data/measured_calibrations.json``. Only
the fitted numbers ship, never the measurements.

``--check`` writes nothing and exits with status 1 if the shipped file differs from a
fresh fit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a plain script from a source checkout
    sys.path.insert(0, str(REPO_ROOT))

from model.measured.calibrate import fit, to_document  # noqa: E402
from model.measured.measurements import read_measurements  # noqa: E402
from model.workload import file_sha256  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "model" / "data" / "measured_calibrations.json"
SOURCE = {
    "description": (
        "dense models and mixtures of experts of the ML.ENERGY Leaderboard v3 per-model "
        "files (vLLM on H100 and B200)"
    ),
    "repository": "https://github.com/ml-energy/leaderboard",
    "folder": "public/data/models/",
    "commit": "0cd52dab897c",
    "attribution": (
        'Chung et al., "The ML.ENERGY Benchmark: Toward Automated Inference Energy '
        'Measurement and Optimization", NeurIPS Datasets and Benchmarks 2025'
    ),
}


def build(data_dir: Path) -> dict[str, object]:
    files = sorted((data_dir / "mlenergy").glob("*.json"))
    if not files:
        raise SystemExit(f"no ML.ENERGY files in {data_dir / 'mlenergy'}")
    # every row the model describes: the shared terms come from the dense models, the
    # experts' terms from the mixtures of experts (docs/calibration.md, section 4)
    rows = read_measurements(files)
    doc = to_document(fit(rows), rows)
    doc.pop("skipped")  # which published rows the model cannot describe yet: in the docs
    doc.pop("screened")  # the rows the consistency screen keeps out: in the docs (counted)
    doc["source"] = SOURCE | {"files": {f.name: file_sha256(f) for f in files}}
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    text = json.dumps(build(a.data_dir), indent=2, allow_nan=False) + "\n"
    if a.check:
        same = a.out.is_file() and a.out.read_text() == text
        print("up to date" if same else f"{a.out} differs from a fresh fit")
        return 0 if same else 1
    a.out.write_text(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
