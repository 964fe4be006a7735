"""Precise references for the posteriordb bench: long Stan runs, kept in bench/data/posteriordb/.

For each posterior: PyStan (the same build the bench uses), 4 chains after 1,000 warm-up
iterations, as many draws per chain as ``REF_DRAWS`` (default 250,000) or as fit in
``REF_SECONDS`` of sampling (default 600, judged from a 4 x 1,000 pilot), all kept (no thinning).
Per row of ``pymc_cv.summary``'s table (every parameter, transformed parameter and generated
quantity, labelled as ArviZ labels them): the mean, its MCSE (ArviZ, over the 4 chains), the sd,
the ESS of the mean, and the MCSE a 4 x 1,000 run of the same sampler has (from the pilot), so that the
bench can say on which rows the reference is precise enough to tell a CV error of 0.1x MCMC's.
Each row is checked against posteriordb's own reference draws: z = difference / combined MCSE.

With ``REF_EXTEND=1`` an existing reference is made more precise instead of remade: one more long run
(a new seed, ``REF_DRAWS`` draws per chain) is pooled with it, each row's mean weighted by the inverse
square of its MCSE (the runs are independent), and the pilot's ``mcse_4x1000`` is kept.

Replicated data drawn by an rng in generated quantities (``posteriordb_set.CONDITIONAL``) get their mean
from its closed form given the parameters (Rao-Blackwellised): the same expectation, without the rng's noise.

With ``--quantiles`` the 3% and 97% quantiles of every row are added to an existing reference, with their
MCSE (ArviZ), from one more run of as many draws as ``REF_SECONDS`` (default 120) took at the stored runs'
speed (up to ``REF_DRAWS``): quantiles cannot be pooled from the stored moments.  (The exact references of
bench/posteriordb_exact.py have theirs already.)

Usage: python bench/posteriordb_reference.py [--check | --quantiles] [PDB] [NAME ...]
       PDB: a posteriordb checkout (default ../shared/data/posteriordb); NAME: posteriordb names
       (default: the whole set of bench/posteriordb_set.py).  Writes bench/data/posteriordb/NAME.json.
       --check: no sampling; the stored references (long runs and exact ones) are checked again against
       posteriordb's draws (mean, sd and quantiles), and the check is rewritten into each file.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import sys
import time
import warnings

import numpy as np

warnings.simplefilter("ignore")

import arviz as az  # noqa: E402
import posteriordb_set as pset  # noqa: E402
import stan  # noqa: E402

from pymc_cv import compat  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "data", "posteriordb")
PILOT_DRAWS = 1000
PROBS = (0.03, 0.97)
SEED = 20261126


def _sample(p, draws, seed):
    """A fit of 4 chains and its sampling seconds; PyStan takes the seed when it builds (cached)."""
    with contextlib.redirect_stdout(sys.stderr):
        posterior = stan.build(p.code, data=p.data, random_seed=seed)
        t0 = time.perf_counter()
        fit = posterior.sample(num_chains=4, num_samples=draws, num_warmup=1000)
        return posterior, fit, time.perf_counter() - t0


def _row_arrays(fit, posterior):
    """{label: (chain, draw) array} of every scalar row, labelled as summary labels them."""
    post = compat.group(compat.pystan_posterior(fit, posterior), "posterior")
    labeller = compat.labeller()
    return {labeller.make_label_flat(name, sel, isel): np.asarray(values, dtype=float)
            for name, sel, isel, values in compat.var_iter(post, list(post.data_vars))}


def _mcse(values):
    return float(compat.mcse_mean(values)) if np.ptp(values) > 0 else 0.0


def make(pdb, name, max_draws, seconds):
    p = pset.load(pdb, name)
    posterior, pilot, t_pilot = _sample(p, PILOT_DRAWS, SEED)
    pilot_rows = _row_arrays(pilot, posterior)
    # the pilot includes 1,000 warm-up iterations: time per post-warm-up draw is at most t / 2,000
    per_draw = t_pilot / (PILOT_DRAWS + 1000)
    draws = int(min(max_draws, max(PILOT_DRAWS, seconds / per_draw)))
    posterior, fit, t_long = _sample(p, draws, SEED + 1)
    rows = {}
    arrays = _row_arrays(fit, posterior)
    conditional = _conditional_means(name, arrays)
    for label, values in arrays.items():
        mean_of = conditional.get(label, values)
        rows[label] = {
            "mean": float(mean_of.mean()), "mcse": _mcse(mean_of), "sd": float(values.std()),
            "ess_mean": float(compat.ess_mean(mean_of)) if np.ptp(mean_of) > 0 else float("nan"),
            "mcse_4x1000": _mcse(pilot_rows[label]),
        }
    check = pset.posteriordb_check(rows, p.reference_draws)
    how = {
            "sampler": f"PyStan {stan.__version__} NUTS, defaults", "chains": 4, "warmup": 1000,
            "draws_per_chain": draws, "seed": SEED + 1, "sampling_seconds": round(t_long, 1),
            "pilot": f"4 x {PILOT_DRAWS} draws, seed {SEED}, {t_pilot:.1f} s (gives mcse_4x1000)",
            "arviz": az.__version__, "python": platform.python_version(),
            "date": datetime.date.today().isoformat(),
        }
    if name in pset.CONDITIONAL:
        how["conditional_means"] = pset.CONDITIONAL[name][1]
    return {"name": name, "how": how, "rows": rows, "posteriordb_check": check}


def _conditional_means(name, arrays):
    """{label: per-draw conditional mean} of the rows of ``name`` that are Rao-Blackwellised (see
    ``posteriordb_set.CONDITIONAL``): the sd stays that of the row's own draws, and ``mcse_4x1000`` that of a
    plain 4 x 1,000 run, which is what the bench's MCMC error is."""
    if name not in pset.CONDITIONAL:
        return {}
    return pset.CONDITIONAL[name][0](arrays)


def extend(pdb, name, draws, old):
    """``old`` pooled with one more independent long run of ``draws`` per chain."""
    p = pset.load(pdb, name)
    runs = old["how"].get("runs") or [{k: old["how"][k] for k in ("draws_per_chain", "seed", "sampling_seconds")}]
    seed = max(r["seed"] for r in runs) + 1
    posterior, fit, t_long = _sample(p, draws, seed)
    rows = {}
    arrays = _row_arrays(fit, posterior)
    conditional = _conditional_means(name, arrays) if "conditional_means" in old["how"] else {}
    for label, values in arrays.items():
        mean_of = conditional.get(label, values)
        before, mcse = old["rows"][label], _mcse(mean_of)
        if before["mcse"] > 0 and mcse > 0:
            w = np.array([before["mcse"] ** -2, mcse ** -2])
            mean = float(w @ [before["mean"], mean_of.mean()] / w.sum())
            pooled = float(w.sum() ** -0.5)
        else:
            mean, pooled = float(mean_of.mean()), 0.0
        n_old = 4 * sum(r["draws_per_chain"] for r in runs)
        sd = float(np.sqrt((n_old * before["sd"] ** 2 + values.size * values.var()) / (n_old + values.size)))
        ess = before.get("ess_mean", float("nan")) + (
            float(compat.ess_mean(mean_of)) if np.ptp(mean_of) > 0 else float("nan"))
        rows[label] = {"mean": mean, "mcse": pooled, "sd": sd, "ess_mean": ess,
                       "mcse_4x1000": before["mcse_4x1000"]}
    runs = runs + [{"draws_per_chain": draws, "seed": seed, "sampling_seconds": round(t_long, 1)}]
    how = dict(old["how"], runs=runs,
               draws_per_chain=sum(r["draws_per_chain"] for r in runs),
               sampling_seconds=round(sum(r["sampling_seconds"] for r in runs), 1),
               seed=[r["seed"] for r in runs],
               pooling="independent runs of 4 chains each, means weighted by 1 / mcse^2",
               date=datetime.date.today().isoformat())
    return {"name": name, "how": how, "rows": rows,
            "posteriordb_check": pset.posteriordb_check(rows, p.reference_draws)}


def add_quantiles(pdb, name, old, max_draws, seconds):
    """``old`` with the ``PROBS`` quantiles of every row and their mcse (ArviZ), from one more run of its own
    (a new seed; as many draws as fit in ``seconds``, judged from the stored runs' speed): quantiles cannot be
    pooled from stored moments, and the long runs' draws are not kept."""
    p = pset.load(pdb, name)
    how = old["how"]
    per_draw = how["sampling_seconds"] / (how["draws_per_chain"] + 1000 * len(how.get("runs", [None])))
    draws = int(min(max_draws, max(PILOT_DRAWS, seconds / per_draw)))
    runs = how.get("runs") or [how]
    seed = int(max(np.max(r["seed"]) for r in runs)) + 100
    posterior, fit, t_run = _sample(p, draws, seed)
    rows = {}
    for label, values in _row_arrays(fit, posterior).items():
        varying = np.ptp(values) > 0
        ses = [compat.mcse_quantile(values, q) if varying else 0.0 for q in PROBS]
        rows[label] = dict(old["rows"][label], **pset.quantile_entry(PROBS, np.quantile(values, PROBS), ses))
    how = dict(how, quantiles={"probs": list(PROBS), "draws_per_chain": draws, "seed": int(seed),
                               "sampling_seconds": round(t_run, 1), "date": datetime.date.today().isoformat()})
    return {"name": name, "how": how, "rows": rows,
            "posteriordb_check": pset.posteriordb_check(rows, p.reference_draws)}


def describe(ref):
    rows = ref["rows"].values()
    ratio = np.array([r["mcse"] / r["mcse_4x1000"] for r in rows if r.get("mcse_4x1000", 0) > 0])
    check = ref["posteriordb_check"]
    z = np.array([abs(c["z"]) for c in check.values()])
    z_sd = np.array([abs(c["z_sd"]) for c in check.values()])
    z_q = np.array([abs(v) for c in check.values() for k, v in c.items() if k.startswith("z_q")])
    far = [lab for lab, c in check.items() if abs(c["z"]) > 4 or abs(c["z_sd"]) > 4]
    how = ref["how"]
    return (f"| {ref['name']} | {len(ref['rows'])} | {how.get('draws_per_chain', 'exact')} "
            f"| {how.get('sampling_seconds', '-')} | {np.median(ratio) if ratio.size else 0:.3f} "
            f"| {np.mean(ratio < 0.1) if ratio.size else 1:.0%} | {len(z)} | {np.max(z, initial=0):.2f} "
            f"| {np.mean(z <= 2) if z.size else 1:.0%} | {np.max(z_sd, initial=0):.2f} "
            f"| {np.mean(z_sd <= 2) if z_sd.size else 1:.0%} | {np.max(z_q, initial=0):.2f} "
            f"| {np.mean(z_q <= 2) if z_q.size else 1:.0%} | {', '.join(far) or '-'} |")


HEADER = ("| posterior | rows | draws / chain | s | median ref mcse / 4x1000 mcse | rows below 0.1 "
          "| rows in posteriordb | max abs z | abs z <= 2 | max abs z of the sd | abs z of the sd <= 2 "
          "| max abs z of the 3% and 97% quantiles | their abs z <= 2 "
          "| abs z > 4 (mean or sd) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def recheck(pdb, name, ref):
    """``ref`` with its posteriordb check made again from its rows (no sampling)."""
    return dict(ref, posteriordb_check=pset.posteriordb_check(ref["rows"], pset.load(pdb, name).reference_draws))


def main():
    args = sys.argv[1:]
    mode = args.pop(0) if args and args[0] in ("--check", "--quantiles") else None
    pdb = args.pop(0) if args and os.path.isdir(args[0]) else pset.DEFAULT_PDB
    names = args or pset.NAMES
    max_draws = int(os.environ.get("REF_DRAWS", 250_000))
    seconds = float(os.environ.get("REF_SECONDS", 120 if mode == "--quantiles" else 600))
    os.makedirs(OUT, exist_ok=True)
    lines = []
    for name in names:
        path = os.path.join(OUT, f"{name}.json")
        if mode == "--check":
            with open(path) as fh:
                ref = recheck(pdb, name, json.load(fh))
        elif mode == "--quantiles":
            with open(path) as fh:
                ref = json.load(fh)
            if "draws_per_chain" not in ref["how"]:
                continue  # an exact reference (bench/posteriordb_exact.py) has its quantiles
            ref = add_quantiles(pdb, name, ref, max_draws, seconds)
        elif os.environ.get("REF_EXTEND") == "1":
            with open(path) as fh:
                ref = extend(pdb, name, max_draws, json.load(fh))
        else:
            ref = make(pdb, name, max_draws, seconds)
        with open(path, "w") as fh:
            json.dump(ref, fh, indent=1)
        lines.append(describe(ref))
        print(lines[-1], flush=True)
    print("\n" + HEADER + "\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
