"""Coverage of `cv_estimate` on a Gaussian random walk with unknown step size, against exact means.

The model (PyMC): s ~ HalfNormal(1), x = GaussianRandomWalk(sigma=s, init N(0, 2^2), 30 points),
y_t ~ N(x_t, 0.5^2).  Given s the posterior of x is Gaussian in closed form, so E[x_t | y] and E[s | y]
are exact by quadrature over s (6,001 points): no reference run.  The posterior is a funnel in 31
dimensions (the step size sets the spread of every x_t), a shape the coverage grid's targets do not
have.

Per replication: 4,000 draws, either 4 x 1,000 of PyMC's NUTS (``nuts``) or independent draws from the
exact posterior (``iid``), their scores from the model, then `cv_estimate` of the 31 posterior means
with ``method`` (default "auto").  Printed per method chosen: rows, share within 2 se of the exact
mean, root mean square of error / se, and root mean square error over the plain mean's.

Usage: python bench/random_walk.py [replications] [nuts|iid] [method]   (default 6 nuts auto)
       python bench/random_walk.py summary [replications] [data seed ...]   (default 6 runs, data seeds 0 1 2)

``summary``: each data set (the observations drawn with that seed; 0 is the data above) sampled by
PyMC's NUTS, 4 x 1,000 draws per run, then ``pymc_cv.summary(idata, model=model)`` with defaults (every
x_t and s, rows and squares fitted together): per data set the chains' E-BFMI, the divergences, the
share of the 31 rows within 2 se of the exact means, the share marked reliable, and the same coverage
and the largest |error| / se among the rows marked reliable.
"""

import sys
import warnings

import numpy as np
from scipy import stats

T = 30
OBS_SD = 0.5
INIT_SD = 2.0


def data():
    rng = np.random.default_rng(0)
    return np.cumsum(rng.normal(0, 0.3, T)) + rng.normal(0, OBS_SD, T)


def model(y):
    import pymc as pm

    with pm.Model() as m:
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", pm.GaussianRandomWalk("x", sigma=s, init_dist=pm.Normal.dist(0, INIT_SD), steps=T - 1),
                  OBS_SD, observed=y)
    return m


def _given_s(s, y):
    """Prior covariance of x given s, and the posterior mean and covariance of x given s and y."""
    t = np.arange(T)
    prior = INIT_SD**2 + s**2 * np.minimum.outer(t, t)
    gain = np.linalg.solve(prior + OBS_SD**2 * np.eye(T), prior).T
    return prior, gain @ y, prior - gain @ prior


def posterior_of_s(y):
    """A grid over s and the posterior probabilities of its points."""
    grid = np.linspace(1e-4, 3.0, 6001)
    logp = []
    for s in grid:
        prior = _given_s(s, y)[0]
        logp.append(stats.multivariate_normal.logpdf(y, np.zeros(T), prior + OBS_SD**2 * np.eye(T))
                    + stats.halfnorm.logpdf(s))
    w = np.exp(np.array(logp) - max(logp))
    return grid, w / w.sum()


def exact_means(y, grid, w):
    """E[x_t | y] (t = 0..29) and E[s | y]."""
    means = np.array([_given_s(s, y)[1] for s in grid])
    return np.r_[w @ means, w @ grid]


def iid_draws(y, grid, w, n, rng):
    s = rng.choice(grid, size=n, p=w) + rng.uniform(-0.25, 0.25, n) * (grid[1] - grid[0])
    x = np.empty((n, T))
    for k, sk in enumerate(s):
        _, mean, cov = _given_s(sk, y)
        x[k] = rng.multivariate_normal(mean, 0.5 * (cov + cov.T))
    return x, s


def draws_and_scores(m, y, how, seed, grid, w):
    """(values (n, 31), unconstrained draws, scores, chain labels) in the order x_0..x_29, s."""
    import pymc as pm

    from pymc_cv.pymc.scores import SamplerGradient

    if how == "nuts":
        with m:
            idata = pm.sample(1000, tune=1000, chains=4, random_seed=seed, progressbar=False,
                              compute_convergence_checks=False)
        x = idata.posterior["x"].values.reshape(-1, T)
        s = idata.posterior["s"].values.ravel()
        chain = np.repeat(np.arange(4), 1000)
    else:
        x, s = iid_draws(y, grid, w, 4000, np.random.default_rng(seed))
        chain = None
    names = [v.name for v in m.value_vars]
    X = np.column_stack([np.log(s)[:, None] if name == "s_log__" else x for name in names])
    scores = SamplerGradient(m, {})(X)[1]
    # the same columns in the order x_0..x_29, s_log__
    order = np.r_[np.arange(1, T + 1), 0] if names[0] == "s_log__" else np.arange(T + 1)
    return np.column_stack([x, s]), X[:, order], scores[:, order], chain


def main(reps=6, how="nuts", method="auto"):
    warnings.simplefilter("ignore")
    import logging

    import pymc_cv

    logging.getLogger("pymc").setLevel(logging.ERROR)
    y = data()
    m = model(y)
    grid, w = posterior_of_s(y)
    truth = exact_means(y, grid, w)
    out = {}
    for rep in range(reps):
        Y, X, S, chain = draws_and_scores(m, y, how, rep + 1, grid, w)
        res = pymc_cv.cv_estimate(Y, X, S, chain=chain, method=method, random_seed=rep)
        for j in range(Y.shape[1]):
            err = res.estimate[j] - truth[j]
            out.setdefault(res.method[j], []).append((err / res.se[j], err, res.mc_estimate[j] - truth[j],
                                                      bool(res.se_reliable[j])))
        print(f"replication {rep + 1}: {dict(zip(*np.unique(res.method, return_counts=True)))}", flush=True)
    print(f"\n{how} draws, 4,000 a replication, {reps} replications, method={method!r}; 31 exact means each\n")
    print("| method | rows | marked reliable | within 2 se | rms error / se | rms error / rms MC error |")
    print("|---|---|---|---|---|---|")
    allz, all_err, all_mc = [], [], []
    for name, rows in sorted(out.items()):
        z, err, mc_err, rel = (np.array(v) for v in zip(*rows))
        ratio = np.sqrt(np.mean(err**2) / np.mean(mc_err**2))
        allz.append(z), all_err.append(err), all_mc.append(mc_err)
        print(f"| {name} | {z.size} | {rel.mean():.0%} | {np.mean(np.abs(z) <= 2):.0%} | {np.sqrt(np.mean(z**2)):.2f} "
              f"| {ratio:.2f} |")
    z, err, mc_err = (np.concatenate(v) for v in (allz, all_err, all_mc))
    print(f"| all | {z.size} | | {np.mean(np.abs(z) <= 2):.0%} | {np.sqrt(np.mean(z**2)):.2f} "
          f"| {np.sqrt(np.mean(err**2) / np.mean(mc_err**2)):.2f} |")


def data_with_seed(seed):
    """Observations of the random walk drawn with ``seed`` (0: ``data()``)."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.normal(0, 0.3, T)) + rng.normal(0, OBS_SD, T)


def through_summary(reps=6, data_seeds=(0, 1, 2)):
    warnings.simplefilter("ignore")
    import logging

    import arviz as az
    import pymc as pm

    import pymc_cv

    logging.getLogger("pymc").setLevel(logging.ERROR)
    labels = [f"x[{t}]" for t in range(T)] + ["s"]
    print("| data | runs | smallest E-BFMI of a run's chains | divergences per run | rows within 2 se "
          "| marked reliable | reliable rows within 2 se | largest abs(error) / se, reliable rows |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in data_seeds:
        y = data_with_seed(seed)
        m = model(y)
        truth = exact_means(y, *posterior_of_s(y))
        z, reliable, bfmi, div = [], [], [], []
        for rep in range(reps):
            with m:
                idata = pm.sample(1000, tune=1000, chains=4, random_seed=100 + rep, progressbar=False,
                                  compute_convergence_checks=False)
            table = pymc_cv.summary(idata, model=m, progressbar=False).loc[labels]
            z.append((table["cv_mean"].to_numpy(float) - truth) / (table["cv_mcse"] + table["bias_allowance"]).to_numpy(float))
            reliable.append(table["se_reliable"].to_numpy(bool))
            bfmi.append(float(np.min(az.bfmi(idata))))
            div.append(int(idata.sample_stats["diverging"].sum()))
        z, reliable = np.concatenate(z), np.concatenate(reliable)
        within = np.abs(z) <= 2
        kept = (f"{np.mean(within[reliable]):.0%} | {np.max(np.abs(z[reliable])):.1f}" if reliable.any() else "- | -")
        print(f"| {seed} | {reps} | {min(bfmi):.2f}-{max(bfmi):.2f} | {min(div)}-{max(div)} | {np.mean(within):.0%} "
              f"| {np.mean(reliable):.0%} | {kept} |", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "summary":
        through_summary(int(args[1]) if len(args) > 1 else 6, [int(a) for a in args[2:]] or (0, 1, 2))
        sys.exit()
    main(int(args[0]) if args else 6, args[1] if len(args) > 1 else "nuts", args[2] if len(args) > 2 else "auto")
