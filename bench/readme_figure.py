"""The README's picture: eight schools (non-centred), pm.sample 4 x 1,000 at target_accept=0.95 (no divergent
transitions: with them the bars add the table's bias_allowance to the se), `summary` with default arguments;
per row the error of the plain MCMC mean and of the CV mean against the exact posterior mean
(bench/workload_models.py), in posterior sds, with +/- 2 se bars.

Usage: python bench/readme_figure.py [out.png]      (default docs/_static/eight_schools.png; about a minute)
"""

import sys
import warnings
from pathlib import Path

import numpy as np

warnings.simplefilter("ignore")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pymc as pm  # noqa: E402
import workload_models as wm  # noqa: E402

import pymc_cv  # noqa: E402


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parents[1] / "docs" / "_static" / "eight_schools.png")
    model, _, ref = wm.eight_schools()
    with model:
        idata = pm.sample(1000, tune=1000, chains=4, random_seed=1, progressbar=False, target_accept=0.95)
    table = pymc_cv.summary(idata, model=model, progressbar=False)
    rows = [lab for lab in table.index if lab in ref]
    truth = np.array([ref[lab][0] for lab in rows])
    sd = np.array([ref[lab][2] for lab in rows])
    t = table.loc[rows]
    pos = np.arange(len(rows))[::-1]
    fig, ax = plt.subplots(figsize=(6.4, 0.32 * len(rows) + 1.6))
    ax.axvline(0.0, color="0.3", lw=0.8)
    ax.errorbar((t["mean"] - truth) / sd, pos + 0.15, xerr=2 * t["mcse_mean"] / sd, fmt="o", ms=4, color="0.55",
                capsize=2, label="MCMC mean")
    ax.errorbar((t["cv_mean"] - truth) / sd, pos - 0.15, xerr=2 * (t["cv_mcse"] + t["bias_allowance"]) / sd, fmt="s", ms=4, color="C0",
                capsize=2, label="pymc_cv.summary")
    ax.set_yticks(pos)
    ax.set_yticklabels(rows)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("error against the exact posterior mean, in posterior sds (bars: ± 2 se)")
    n_div = int(idata.sample_stats["diverging"].sum())
    ax.set_title(f"Eight schools, 4 x 1,000 NUTS draws ({n_div} divergent), two estimates", fontsize="medium")
    ax.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    ratio = np.median(t["mcse_mean"] / t["cv_mcse"])
    print(f"wrote {out}; median MCMC se / CV se {ratio:.1f}; CV within 2 se on "
          f"{np.mean(np.abs(t['cv_mean'] - truth) <= 2 * (t['cv_mcse'] + t['bias_allowance'])):.0%} of {len(rows)} rows")


if __name__ == "__main__":
    main()
