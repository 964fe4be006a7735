"""Writes examples/notebooks/hierarchical_gp.ipynb (outputs stripped); edit here, rerun, commit both."""
from pathlib import Path

import nbformat as nbf

nb = nbf.v4.new_notebook()
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
nb["cells"] = [
    md("""# Hierarchical Gaussian process: Meta-CVs across test inputs

A GP regression of disease progression on body-mass index (scikit-learn's bundled diabetes data, 100
training points, both standardised).  Kernel k(z, z') = a^2 exp(-(z - z')^2 / (2 l^2)) with priors
a, l ~ Gamma(25, 25) and known noise sd 0.8; NUTS samples the hyperparameters from the marginal likelihood.

The quantities of interest are the posterior predictive means at many test inputs z_j:
E[f_j(a, l)] with f_j = k(z_j, Z) (K + s^2 I)^-1 y.  Each is one integral over the same posterior, one *task*.
When f is expensive (a solve per draw and input, a simulator, ...) each task may only get a few draws.
Meta-CVs learn one neural Stein control variate *across* tasks, then adapt it to a new task in one
gradient step, which works with 10 draws per task where a per-task fit has little to learn from.

The exact answer for every task comes from quadrature over (log a, log l), so every error below is real.
`PYMC_CV_NB_FAST=1` (the test suite sets it) meta-trains for fewer iterations and uses a coarser grid."""),
    code("""import os, sys, time, warnings, logging
import numpy as np, pandas as pd, arviz as az, matplotlib.pyplot as plt, pymc as pm
from scipy import stats
import pymc_cv
from pymc_cv.plots import plot_cv_fit
sys.path.insert(0, os.path.abspath(".."))          # examples/, for the model definitions
import hierarchical_gp_metacv as gp
warnings.filterwarnings("ignore"); logging.getLogger("pymc").setLevel(logging.ERROR)
FAST = os.environ.get("PYMC_CV_NB_FAST") == "1"
z, y, z_all = gp.load()                              # training inputs, targets, held-out inputs
z_test = z_all[np.linspace(0, z_all.size - 1, 200).astype(int)]   # 200 test inputs = 200 tasks
model = gp.build_model(z, y)
model"""),
    md("""## Sample and check

PyTensor's Numba backend: the C backend has no BLAS on this machine and is 50x slower for the GP's
matrix algebra.  `compute_scores` adds the unconstrained draws (`amp_log__`, `ls_log__`) and the gradient
of the log density at each of them."""),
    code("""with model:
    idata = pm.sample(1000, tune=1000, chains=2, random_seed=1, progressbar=False,
                      compile_kwargs={"mode": "NUMBA"})
idata = pymc_cv.compute_scores(idata, model, compile_kwargs={"mode": "NUMBA"})
az.summary(idata, var_names=["amp", "ls"])"""),
    md("""## The exact answer, by quadrature

The posterior is two-dimensional, so the expectations can be computed on an 81 x 81 grid (41 x 41 in the
short form) in (log a, log l)
reaching 7 posterior sd each way.  The log density below is the model's (checked against PyMC's
`compile_logp` at two points) and halving the grid changes no expectation by more than 1e-8."""),
    code("""def log_post(la, ll):
    a, l = np.exp(la), np.exp(ll)
    K = a**2 * np.exp(-((z[:, None] - z[None, :]) ** 2) / (2 * l**2)) + gp.NOISE**2 * np.eye(z.size)
    prior = stats.gamma(25, scale=1 / 25)
    return stats.multivariate_normal(np.zeros(z.size), K).logpdf(y) + prior.logpdf(a) + la + prior.logpdf(l) + ll

pymc_logp = model.compile_logp()
for la, ll in [(-0.1, 0.2), (0.05, -0.1)]:
    assert abs(log_post(la, ll) - pymc_logp({"amp_log__": la, "ls_log__": ll})) < 1e-4

unc = idata.unconstrained_posterior
G = 41 if FAST else 81
grid = [np.linspace(float(unc[v].mean()) - 7 * float(unc[v].std()), float(unc[v].mean()) + 7 * float(unc[v].std()), G)
        for v in ("amp_log__", "ls_log__")]
LA, LL = np.meshgrid(*grid, indexing="ij")
lp = np.array([log_post(a, b) for a, b in zip(LA.ravel(), LL.ravel())]).reshape(G, G)
F_grid = gp.predictive_means(np.exp(LA.ravel()), np.exp(LL.ravel()), z, y, z_test).reshape(G, G, -1)

def quadrature(step):
    w = np.exp(lp[::step, ::step] - lp.max()); w /= w.sum()
    return np.einsum("ij,ijk->k", w, F_grid[::step, ::step])

truth = quadrature(1)
print(f"grid halved: largest change {np.abs(quadrature(2) - truth).max():.1e}")"""),
    md("""## 200 tasks with 10 draws each

Each task j gets its own 10 draws (a random subset of the 2,000).  Half of the tasks (every other test
input) meta-train the Meta-CV; it is then adapted to, and estimates, each task of the other half, which it has
never seen.  For comparison: the plain average of the same 10 draws (MC) and a control functional fitted
per task on them (CF)."""),
    code("""post = idata.posterior
amp, ls = (np.asarray(post[v]).reshape(-1) for v in ("amp", "ls"))
F = gp.predictive_means(amp, ls, z, y, z_test)                       # (2000 draws, 200 tasks)
X = np.column_stack([np.asarray(unc[v]).reshape(-1) for v in ("amp_log__", "ls_log__")])
S = np.column_stack([np.asarray(idata.score[v]).reshape(-1) for v in ("amp_log__", "ls_log__")])
rng = np.random.default_rng(0)
picks = [rng.choice(amp.size, size=10, replace=False) for _ in z_test]
tasks = [(F[p, j], X[p], S[p]) for j, p in enumerate(picks)]
train, test = np.arange(200)[::2], np.arange(200)[1::2]

start = time.perf_counter()
mcv = pymc_cv.MetaCV(hidden=(64, 64), meta_iterations=200 if FAST else 1500, random_seed=0, progressbar=False)
mcv.meta_fit([tasks[j] for j in train])
meta_s = time.perf_counter() - start
start = time.perf_counter()
res = mcv.estimate(*[[tasks[j][k] for j in test] for k in range(3)])
adapt_s = time.perf_counter() - start
start = time.perf_counter()
cf = np.array([float(pymc_cv.cv_estimate(*tasks[j], method="cf").estimate) for j in test])
cf_s = time.perf_counter() - start

err = {"MC": np.abs(res.mc_estimate - truth[test]), "CF per task": np.abs(cf - truth[test]),
       "Meta-CV": np.abs(res.estimate - truth[test])}
pd.DataFrame({"mean abs error": {k: e.mean() for k, e in err.items()},
              "ratio to MC": {k: e.mean() / err["MC"].mean() for k, e in err.items()},
              "seconds for 100 tasks": {"MC": 0.0, "CF per task": cf_s, "Meta-CV": adapt_s}}).round(4)"""),
    code("""print(f"meta-training: {meta_s:.1f} s; Meta-CV fell back to MC on {np.mean(res.method == 'mc'):.0%} of the "
      f"test tasks; its 2-se interval covered the truth on {np.mean(err['Meta-CV'] <= 2 * res.se):.0%}")"""),
    md("""Top: the data and the exact predictive mean.  Bottom: the error of each test task's estimate from its 10
draws, plain average against Meta-CV (log scale); points are tasks, ordered by their input."""),
    code("""fig, (top, low) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[1.2, 1])
top.plot(z, y, "k.", ms=4, label="training data")
top.plot(z_test, truth, "C0-", label="posterior predictive mean (quadrature)")
top.set_ylabel("progression (standardised)"); top.legend(fontsize="small")
low.semilogy(z_test[test], err["MC"], "o", ms=4, color="0.55", label="MC, 10 draws")
low.semilogy(z_test[test], err["Meta-CV"], "s", ms=4, color="C0", label="Meta-CV, 10 draws")
low.set_xlabel("body-mass index (standardised)"); low.set_ylabel("|error|"); low.legend(fontsize="small")
fig.tight_layout()"""),
    md("""With two smooth hyperparameters a tuned kernel CV per task is hard to beat, even on 10 draws; the
Meta-CV's advantage is that it costs one gradient step per task (all 100 adapted in one batched call), which is
what a stream of tasks or more dimensions needs.

## The one-call route: `summary(..., method="metacv")`

With all 2,000 draws for every task, `summary` meta-trains on half of the tasks and estimates the other half,
then the reverse, so no task is estimated by a network trained on it.  Here for 40 of the inputs; with this
many draws the default vv-CV (`method="auto"`) is far more accurate again, and the table says how much each
gained."""),
    code("""sub = np.arange(0, 200, 10 if FAST else 5)
def predictive_mean(p):                               # posterior Dataset -> (chain, draw, sub.size)
    f = gp.predictive_means(np.asarray(p["amp"]).ravel(), np.asarray(p["ls"]).ravel(), z, y, z_test[sub])
    return f.reshape(p.sizes["chain"], p.sizes["draw"], -1)

tables = {m: pymc_cv.summary(idata, integrands={"pred": predictive_mean}, method=m, progressbar=False,
                             **({"metacv": {"meta_iterations": 100}} if FAST and m == "metacv" else {}))
          for m in ("metacv", "auto")}
pd.DataFrame({"MCMC mean": np.abs(tables["auto"]["mean"] - truth[sub]).mean(),
              **{f"cv_mean ({m})": np.abs(t["cv_mean"] - truth[sub]).mean() for m, t in tables.items()}},
             index=[f"mean abs error over {sub.size} inputs"])"""),
    md("""The Meta-CV's fit for one input, on draws it did not see when adapting (left), and the size of its residuals
against the spread of f that plain MCMC averages (right): the gap between the two lines is its variance
reduction."""),
    code("""plot_cv_fit(tables["metacv"], f"pred[{sub.size // 2}]");"""),
]
nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb["metadata"]["execution"] = {"timeout": 1200}
nbf.write(nb, Path(__file__).parents[1] / "examples" / "notebooks" / "hierarchical_gp.ipynb")
