"""Writes examples/notebooks/van_der_pol_evidence.ipynb (outputs stripped); edit here, rerun, commit both."""
from pathlib import Path

import nbformat as nbf

nb = nbf.v4.new_notebook()
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
nb["cells"] = [
    md("""# Model evidence with thermodynamic integration: van der Pol against a linear oscillator

Noisy observations of an oscillator at s = 0, 1, ..., 10 (simulated from a van der Pol oscillator).  Two
models with one unknown parameter each, the same log-normal prior on it:

- **van der Pol**: u'' - x (1 - u^2) u' + u = 0 (a limit cycle);
- **damped linear**: u'' + x u' + u = 0 (decays to zero; its solution is in closed form).

The log evidence log p(y) of each comes from thermodynamic integration over power posteriors
p(y|x)^t p(x), with plain averages (MC), control functionals per rung (CF) and vv-CVs across neighbouring
rungs, all on the same NUTS draws; one-dimensional quadrature gives the exact answer to compare with.
`PYMC_CV_NB_FAST=1` (the test suite sets it) uses 11 rungs instead of 21 and 100 tuning steps instead of 300."""),
    code("""import os, sys, warnings
import numpy as np, pandas as pd, matplotlib.pyplot as plt
import pymc_cv
from pymc_cv.evidence import ti_from_arrays
sys.path.insert(0, os.path.abspath(".."))          # examples/, for the model definitions
import van_der_pol_evidence as vdp
warnings.filterwarnings("ignore")
FAST = os.environ.get("PYMC_CV_NB_FAST") == "1"
y = vdp.simulate(0)
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(vdp.S_OBS, y, "o", label="data")
ax.plot(vdp.S_OBS, vdp.solve_exact(1.0), "-", label="van der Pol, x = 1")
ax.plot(vdp.S_OBS, vdp.damped_linear(0.3), "--", label="damped linear, x = 0.3")
ax.set_xlabel("s"); ax.legend();"""),
    md("""## Power posteriors and TI

`thermodynamic_integration` compiles NUTS once per model (Numba backend: the van der Pol ODE is a PyTensor `scan`) and
samples every rung of the power ladder; the per-draw log-likelihood and the gradients of log-likelihood and
log-prior are kept in `res.draws`, so other estimators can be run on the very same draws."""),
    code("""rungs = 11 if FAST else 21
models = {"van der Pol": vdp.build_model(y), "damped linear": vdp.build_model(y, "linear")}
exact = {"van der Pol": vdp.log_evidence_quadrature(y)[0],
         "damped linear": vdp.log_evidence_quadrature(y, vdp.damped_linear)[0]}
results = {}
for name, model in models.items():
    res = pymc_cv.thermodynamic_integration(model, rungs, draws=40, tune=100 if FAST else 300, chains=2, random_seed=1,
                                            progressbar=False, compile_kwargs={"mode": "NUMBA"})
    cf = ti_from_arrays(**res.draws, method="cf")
    results[name] = {"MC": (res.mc_log_evidence, res.mc_se), "CF": (cf.log_evidence, cf.se),
                     "vv-CV": (res.log_evidence, res.se), "exact": (exact[name], 0.0), "_res": res}
pd.DataFrame({(name, k): {"log p(y)": v[0], "se": v[1], "error": v[0] - exact[name]}
              for name, r in results.items() for k, v in r.items() if k != "_res"}).T"""),
    md("""The TI curve E_t[log p(y|x)] of the van der Pol model: MC and vv-CV per rung with 2-se bars."""),
    code("""results["van der Pol"]["_res"].plot();"""),
    md("""## Bayes factor

log BF = log p(y | van der Pol) - log p(y | damped linear), with its standard error from the two
independent TI runs."""),
    code("""rows = {}
for k in ["MC", "CF", "vv-CV", "exact"]:
    (a, sa), (b, sb) = results["van der Pol"][k], results["damped linear"][k]
    rows[k] = {"log BF": a - b, "se": float(np.hypot(sa, sb)), "error": (a - b) - (exact["van der Pol"] - exact["damped linear"])}
pd.DataFrame(rows).T"""),
    md("""Both models are compared on the right scale by every estimator here (the data are far from a decaying
oscillation), but only the CV estimates are accurate enough to report the evidence itself to three
decimals; with plain TI the se of each log evidence is of order 0.1."""),
]
nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb["metadata"]["execution"] = {"timeout": 1200}
nbf.write(nb, Path(__file__).parents[1] / "examples" / "notebooks" / "van_der_pol_evidence.ipynb")
