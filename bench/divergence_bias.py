"""The bias divergent transitions leave, and whether `summary`'s se covers it.

Eight schools (non-centred, bench/workload_models.py, exact references by quadrature), sampled by nutpie
at 4 x DRAWS draws:

1. the plain means of RUNS runs (no pymc-cv): per row, their mean error in posterior sd and its z, at
   each target_accept (0.8 leaves divergences, 0.95 almost none): the sampler's bias;
2. `summary` on SEEDS runs per target_accept: the 2-se coverage of the CV means against the exact values,
   with the se plus the table's bias_allowance (its share of the draws x 2 sd) and with the se alone.

Usage: python bench/divergence_bias.py [draws] [runs] [seeds] [first_seed]   (defaults 5000 60 6 1; about 10 min)
Needs nutpie.  Run it alone on the machine.
"""

import sys
import warnings

import numpy as np

warnings.simplefilter("ignore")

import nutpie  # noqa: E402
import workload_models as wm  # noqa: E402

import pymc_cv  # noqa: E402

TARGET_ACCEPT = (0.8, 0.95)


def _sample(compiled, draws, seed, target_accept, scores=False):
    return nutpie.sample(compiled, draws=draws, tune=1000, chains=4, seed=seed, progress_bar=False,
                         target_accept=target_accept, store_unconstrained=scores, store_gradient=scores)


def plain_bias(compiled, ref, draws, runs, target_accept):
    """(labels, mean error / sd, its se, median divergences) of the plain means over ``runs`` runs."""
    labels = ["mu", "tau"] + [f"theta[{j}]" for j in range(8)]
    errs, ndiv = [], []
    for seed in range(100, 100 + runs):
        post = _sample(compiled, draws, seed, target_accept)
        ndiv.append(int(post.sample_stats["diverging"].sum()))
        p = post.posterior
        means = {"mu": float(p["mu"].mean()), "tau": float(p["tau"].mean())}
        means.update({f"theta[{j}]": float(m) for j, m in enumerate(p["theta"].mean(("chain", "draw")).values)})
        errs.append([(means[lab] - ref[lab][0]) / ref[lab][2] for lab in labels])
    errs = np.array(errs)
    return labels, errs.mean(axis=0), errs.std(axis=0, ddof=1) / np.sqrt(runs), float(np.median(ndiv))


def cv_coverage(compiled, ref, draws, seeds, target_accept, first_seed=1):
    """Per run: divergences, and the 2-se coverage of summary's CV means with and without the allowance."""
    out = []
    for seed in range(first_seed, first_seed + seeds):
        idata = _sample(compiled, draws, seed, target_accept, scores=True)
        n_div = int(idata.sample_stats["diverging"].sum())
        table = pymc_cv.summary(idata, progressbar=False)
        labels = [lab for lab in table.index if lab in ref]
        err = np.array([abs(table.loc[lab, "cv_mean"] - ref[lab][0]) for lab in labels])
        se = table.loc[labels, "cv_mcse"].to_numpy(float)
        allowance = table.loc[labels, "bias_allowance"].to_numpy(float)
        out.append((seed, n_div, np.mean(err <= 2 * (se + allowance)), np.mean(err <= 2 * se), len(labels)))
    return out


def main():
    args = [int(a) for a in sys.argv[1:]]
    draws, runs, seeds, first_seed = (args + [5000, 60, 6, 1][len(args):])[:4]
    model, _, ref = wm.eight_schools()
    compiled = nutpie.compile_pymc_model(model)
    print(f"eight schools (non-centred), nutpie 4 x {draws} draws (tune 1000)\n")
    print(f"Plain means over {runs} runs: mean error / posterior sd (z of that mean)\n")
    columns = []
    for ta in TARGET_ACCEPT:
        labels, bias, se, ndiv = plain_bias(compiled, ref, draws, runs, ta)
        columns.append((ta, bias, se, ndiv))
    print("| row | " + " | ".join(f"target_accept {ta} (median {nd:g} divergences)" for ta, _, _, nd in columns)
          + " |")
    print("|---|" + "---|" * len(columns))
    for i, lab in enumerate(labels):
        print(f"| {lab} | " + " | ".join(f"{b[i]:+.1e} ({b[i] / s[i]:+.1f})" for _, b, s, _ in columns) + " |")
    print(f"\nsummary's CV means, 2-se coverage against the exact values ({seeds} runs each)\n")
    print("| target_accept | seed | divergences | coverage | coverage without the divergence allowance |")
    print("|---|---|---|---|---|")
    for ta in TARGET_ACCEPT:
        rows = cv_coverage(compiled, ref, draws, seeds, ta, first_seed)
        for seed, n_div, cov, cov_without, _ in rows:
            print(f"| {ta} | {seed} | {n_div} | {cov:.0%} | {cov_without:.0%} |")
        n = sum(r[4] for r in rows)
        print(f"| {ta} | all | | {sum(r[2] * r[4] for r in rows) / n:.1%} of {n} | "
              f"{sum(r[3] * r[4] for r in rows) / n:.1%} |")


if __name__ == "__main__":
    main()
