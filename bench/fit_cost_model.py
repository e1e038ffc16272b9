"""Fit the planner's cost model (rawcoop/plan/cost.py) to measured candidates, and store it.

    python bench/fit_cost_model.py [--data bench/results/oracle-h200.jsonl] [--out rawcoop/plan/cost_h200.json]
    python bench/fit_cost_model.py --check        # the stored model's regret on the data, no fit, no write

Every oracle row timed many distinct plans of one shape in the same rounds (bench/costdata.py rebuilds them).
The fit minimises, over the rows of the fit set, the squared log error of each plan's modelled time against its
measured time after removing the row's mean (the plans' ranking within a shape is what the planner needs), plus
a small share of the uncentred error (so times stay in µs) and a weak pull of every coefficient towards its
physical starting value (coefficients the data does not see stay there).  Coefficients are fitted as logs, so
all stay positive.  Needs SciPy (``pip install scipy``); the library itself does not.

The validation rows (bench/costdata.py ``is_validation``: a fixed 30% of the shapes, never fitted) are scored
as the planner uses the model: for each shape the candidate of least modelled time among those measured, its
measured time against the best measured one (regret), next to the automatic plan of the measurement's date;
and the planner itself over the whole candidate space (``planner_validation``: how often its choice was one of
the measured candidates, and its regret there).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import costdata  # noqa: E402
from rawcoop.plan import cost  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / "bench" / "results" / "oracle-h200.jsonl"

START = cost.Coefficients(
    peak_tflops=989.4, sm_count=132,            # H200 SXM: dense fp16/bf16, SMs
    eff=(0.80,) * len(cost.TILE_KEYS), bw_sm=112e3, bw_l2=10e6, bw_hbm=4.3e6, overlap=0.05, cluster_kb=0.01, cluster_unit=0.2,
    misaligned=1.5, mn_major_a=1.05, mn_major_b=1.05, mn_mma_a=1.02, mn_mma_b=1.02, clock_gain=0.05, epi_us=0.5, colmajor_epi=1.1, bw_epi=60e3, fill=0.3, pp_fill=0.2, fill0=1.0, fix_us=1.0, split_skew=0.02,
    bw_fix=60e3, sk_piece=0.5, ws_zero=2.0, launch=3.0)
"""Starting values: the data sheet (HBM 4.8 TB/s, L2 -> SM 64 B per clock per SM) and round guesses."""
PRIOR = 0.02            # weight of log(coefficient / start) in the loss
ABSOLUTE = 0.2          # weight of the uncentred log error


def arrays(ms: list) -> tuple[dict, np.ndarray, np.ndarray]:
    """Features of every measured candidate as arrays, their measured µs and row indices."""
    fs = [cost.features(m.problem, m.candidate) for m in ms]
    feats = {k: np.array([f[k] for f in fs], dtype=np.int64 if k == "tile" else float) for k in fs[0]}
    return feats, np.array([m.us for m in ms]), np.array([m.row for m in ms])


def unpack(theta: np.ndarray) -> cost.Coefficients:
    d = START.as_dict()
    n_eff = len(cost.TILE_KEYS)
    d["eff"] = tuple(np.exp(theta[:n_eff]))
    for i, name in enumerate(cost.Coefficients.FITTED[1:]):
        d[name] = float(np.exp(theta[n_eff + i]))
    return cost.Coefficients.from_dict(d)


def pack(co: cost.Coefficients) -> np.ndarray:
    return np.log(np.array(list(co.eff) + [getattr(co, n) for n in cost.Coefficients.FITTED[1:]]))


def modelled(feats: dict, co: cost.Coefficients) -> np.ndarray:
    return cost.time_us(feats, co, eff=np.asarray(co.eff)[feats["tile"]])


def fit(ms: list) -> cost.Coefficients:
    from scipy.optimize import least_squares
    feats, us, rows = arrays(ms)
    uniq, inv = np.unique(rows, return_inverse=True)
    counts = np.bincount(inv)
    weight = 1 / np.sqrt(counts[inv])
    theta0 = pack(START)

    def residuals(theta):
        e = np.log(modelled(feats, unpack(theta)) / us)
        centred = e - (np.bincount(inv, e) / counts)[inv]
        return np.concatenate([centred * weight, ABSOLUTE * e * weight, PRIOR * (theta - theta0)])

    res = least_squares(residuals, theta0, method="trf", x_scale=1.0, max_nfev=400)
    return unpack(res.x)


def regret(ms: list, co: cost.Coefficients) -> dict:
    """Per shape: the measured time of the candidate the model ranks first, and of the automatic plan,
    against the best measured; summarised as geomeans, the worst and the count over 5%."""
    feats, us, rows = arrays(ms)
    pred = modelled(feats, co)
    picks, autos = [], []
    for r in np.unique(rows):
        idx = np.flatnonzero(rows == r)
        best = us[idx].min()
        picks.append(us[idx[np.argmin(pred[idx])]] / best)
        auto = [i for i in idx if ms[i].auto]
        if auto:
            autos.append(us[auto[0]] / best)

    def summary(x):
        x = np.array(x)
        return dict(shapes=int(x.size), geomean=round(float(np.exp(np.log(x).mean())), 4),
                    worst=round(float(x.max()), 4), over_5pct=int((x > 1.05).sum()), over_2pct=int((x > 1.02).sum()))
    log_err = np.log(pred / us)
    return dict(model=summary(picks), auto_then=summary(autos),
                rms_log_error=round(float(np.sqrt(np.mean(log_err ** 2))), 4))


def coverage(ms: list, co: cost.Coefficients) -> dict:
    """The planner over the whole candidate space (rawcoop/plan/select.py with these coefficients): for how
    many shapes its choice was among the measured candidates, and its regret on those."""
    from rawcoop.plan.select import pick, point_of, ranked
    by_row = {}
    for m in ms:
        by_row.setdefault(m.row, []).append(m)
    regrets = []
    for row in by_row.values():
        c = pick(ranked(row[0].problem, co=co))
        key = (point_of(c.cfg), c.dec)
        hit = [m.us for m in row if (point_of(m.candidate.cfg), m.candidate.dec) == key]
        if hit:
            regrets.append(hit[0] / min(m.us for m in row))
    x = np.array(regrets)
    return dict(shapes=len(by_row), measured_choice=int(x.size),
                geomean=round(float(np.exp(np.log(x).mean())), 4) if x.size else None,
                worst=round(float(x.max()), 4) if x.size else None, over_5pct=int((x > 1.05).sum()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--out", default=cost.model_path("h200"))
    ap.add_argument("--check", action="store_true", help="score the stored model only")
    args = ap.parse_args(argv)
    rows = costdata.read_rows(args.data)
    ms = costdata.measured(rows)
    fit_ms = [m for m in ms if not costdata.is_validation(rows[m.row])]
    val_ms = [m for m in ms if costdata.is_validation(rows[m.row])]
    if args.check:
        co = cost.load("h200")[0]
    else:
        co = fit(fit_ms)
    report = dict(fit=regret(fit_ms, co), validation=regret(val_ms, co),
                  planner_validation=coverage(val_ms, co))
    print(json.dumps(report, indent=1))
    if not args.check:
        gpu = {r["gpu"] for r in rows}
        dates = sorted({r["date"] for r in rows})
        doc = dict(gpu=", ".join(sorted(gpu)), fitted=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                   command="python bench/fit_cost_model.py", data=Path(args.data).name,
                   data_dates=[dates[0], dates[-1]], measured_candidates=len(ms),
                   shapes=dict(fit=len({m.row for m in fit_ms}), validation=len({m.row for m in val_ms})),
                   report=report, coefficients={k: (v if not isinstance(v, float) else float(f"{v:.6g}"))
                                                if k != "eff" else [float(f"{x:.5g}") for x in v]
                                                for k, v in co.as_dict().items()})
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
