"""Writes examples/notebooks/multimodal_evidence.ipynb (outputs stripped); edit here, rerun, commit both."""
from pathlib import Path

import nbformat as nbf

nb = nbf.v4.new_notebook()
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
nb["cells"] = [
    md("""# Evidence of a multimodal model: population MCMC where NUTS per rung goes wrong

A sinusoid observed in noise, y_i = sin(w s_i) + e_i, e_i ~ N(0, 0.5^2), with an unknown frequency
w ~ Uniform(0, 10).  The likelihood has a sharp peak at the true frequency and many local ones around it.
Thermodynamic integration (TI) needs E_t[log p(y|w)] under every power posterior p(y|w)^t p(w); at
intermediate t those have several modes of similar mass, and an independent NUTS run per rung stays in
whichever one it starts near.  Population MCMC samples all rungs at once and lets neighbouring rungs swap
states, so the modes are visited in proportion.  The parameter is one-dimensional, so the exact evidence comes
from quadrature.  `PYMC_CV_NB_FAST=1` (the test suite sets it) uses fewer rungs and draws."""),
    code("""import os, sys, warnings
import numpy as np, pandas as pd, matplotlib.pyplot as plt
import pymc_cv
from pymc_cv.evidence import ti_from_arrays
sys.path.insert(0, os.path.abspath(".."))          # examples/, for the model definition
import sinusoid_evidence as sinusoid
warnings.filterwarnings("ignore")
FAST = os.environ.get("PYMC_CV_NB_FAST") == "1"
RUNGS, DRAWS = (10, 300) if FAST else (16, 1500)

y = sinusoid.simulate(0)
model, exact = sinusoid.frequency_model(y)         # w ~ Uniform(0, 10); y ~ N(sin(w s), 0.5)
grid, loglik = sinusoid.GRID, sinusoid.grid_loglik(y)
print(f"exact log p(y) = {exact:.4f}")"""),
    md("""## The power posteriors

Each curve is p_t(w) on the grid, normalised.  At t = 1 one mode holds all the mass; at t around 0.01-0.1
several modes share it."""),
    code("""fig, ax = plt.subplots(figsize=(7, 3))
for t in [0.001, 0.01, 0.05, 0.2, 1.0]:
    p = np.exp(t * (loglik - loglik.max()))
    ax.plot(grid, p / np.trapezoid(p, grid), label=f"t = {t:g}")
ax.set_xlabel("w"); ax.set_yscale("log"); ax.set_ylim(1e-4, None); ax.legend(fontsize=8);"""),
    md("""## TI with an independent NUTS run per rung

Each rung's chains start from the prior and stay near the mode they find.  The result is far off; the notes
say the chains disagree (split R-hat of log p(y|w) at the rungs named) and `reliable` is False."""),
    code("""nuts = pymc_cv.thermodynamic_integration(model, RUNGS, draws=DRAWS, tune=300, method="mc", sampler="nuts",
                                          random_seed=1, progressbar=False)
print(f"NUTS per rung: {nuts.log_evidence:.3f} +- {nuts.se:.3f} (error {nuts.log_evidence - exact:+.3f}), "
      f"reliable = {nuts.reliable}")
print([n for n in nuts.notes if "disagree" in n])"""),
    md("""## TI with population MCMC

`sampler="population"` runs one NUTS walker per temperature in every chain and proposes swaps between
neighbouring temperatures after each step.  The same ladder, the same draws per rung.  The notes give the
exchange acceptance rates."""),
    code("""pop = pymc_cv.thermodynamic_integration(model, RUNGS, draws=DRAWS, tune=300, method="mc",
                                         sampler="population", random_seed=1, progressbar=False)
print(f"population: {pop.log_evidence:.3f} +- {pop.se:.3f} (error {pop.log_evidence - exact:+.3f}), "
      f"reliable = {pop.reliable}")
print([n for n in pop.notes if "exchange" in n])"""),
    md("""The TI curves against the exact E_t[log p(y|w)] (by quadrature): the NUTS rungs that missed modes
sit off the curve."""),
    code("""def exact_curve(t):
    p = np.exp(t * (loglik - loglik.max()))
    return np.trapezoid(p * loglik, grid) / np.trapezoid(p, grid)

fig, ax = plt.subplots(figsize=(7, 3.5))
tt = np.r_[0, np.geomspace(1e-6, 1, 200)]
ax.plot(tt ** 0.2, [exact_curve(t) for t in tt], "k-", lw=1, label="exact")
for name, r, marker in (("NUTS per rung", nuts, "s"), ("population", pop, "o")):
    ax.errorbar(r.temperatures ** 0.2, r.moments.mean, 2 * r.moments.mean_se, fmt=marker, ms=4, label=name)
ax.set_xlabel("t^(1/5)"); ax.set_ylabel("E_t[log p(y|w)]"); ax.legend();"""),
    md("""## The same draws on a finer ladder

`refine=True` reweights each rung's draws onto temperatures in between where neighbouring rungs overlap
little (ZVCV's Expand_Temperatures); no new sampling.  The quadrature error estimate shrinks; the sampling
error stays."""),
    code("""fine = ti_from_arrays(**pop.draws, method="mc", refine=True)
pd.DataFrame({
    "log p(y)": [nuts.log_evidence, pop.log_evidence, fine.log_evidence, exact],
    "se": [nuts.se, pop.se, fine.se, 0.0],
    "quadrature error": [nuts.quadrature_error, pop.quadrature_error, fine.quadrature_error, 0.0],
    "rungs": [nuts.temperatures.size, pop.temperatures.size, fine.temperatures.size, np.nan],
    "reliable": [nuts.reliable, pop.reliable, fine.reliable, True],
}, index=["NUTS per rung", "population", "population, refined", "exact"]).assign(
    error=lambda df: df["log p(y)"] - exact)"""),
    md("""`bench/population_ti.py` repeats this on 5 seeds and on a two-parameter version (frequency and
amplitude): every NUTS-per-rung run was wrong by 8-24 nats and flagged; with 1,500 draws per rung every
population run was within 3 se and 0.2 nats (README, Results)."""),
]
nb["metadata"]["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
out = Path(__file__).parents[1] / "examples" / "notebooks" / "multimodal_evidence.ipynb"
nbf.write(nb, out)
print(f"wrote {out}")
