"""Stan fits through PyStan and CmdStanPy: scores against PyMC's, CVs against conjugate truths.

These compile a real Stan program with PyStan (httpstan caches the build on disk: ~40 s the
first time on a machine, instant after).
"""

from pathlib import Path

import numpy as np
import pytest

stan = pytest.importorskip("stan", reason="PyStan is part of the test extra; pip install -e '.[test]'")

import pymc_cv  # noqa: E402
from example_modules import load_example  # noqa: E402

PROGRAM = Path(__file__).parent / "stan" / "beta_binomial_normal.stan"
DATA = dict(n=20, k=7, a=2.0, b=3.0, J=4, counts=[3, 5, 2, 4], alpha=2.0, beta=1.0, M=3, y=[0.5, 1.0, 1.5],
            m0=0.0, s0=2.0)
# conjugate posterior means: Beta(a + k, b + n - k), Gamma(alpha + sum counts, beta + J), Normal
TRUTH = {"p": (2 + 7) / (2 + 3 + 20), "lambda": (2 + 14) / (1 + 4), "mu": 3.0 / (3 + 1 / 4)}


def build(seed):
    return stan.build(PROGRAM.read_text(), data=DATA, random_seed=seed)  # PyStan seeds at build


@pytest.fixture(scope="module")
def posterior():
    return build(7)


def _pymc_model():
    import pymc as pm

    with pm.Model() as model:
        p = pm.Beta("p", DATA["a"], DATA["b"])
        pm.Binomial("k", DATA["n"], p, observed=DATA["k"])
        lam = pm.Gamma("lambda", DATA["alpha"], DATA["beta"])
        pm.Poisson("counts", lam, observed=np.array(DATA["counts"]))
        mu = pm.Normal("mu", DATA["m0"], DATA["s0"])
        pm.Normal("y", mu, 1.0, observed=np.array(DATA["y"]))
    return model


@pytest.mark.slow
def test_pystan_scores_match_pymc_and_cvs_beat_mcmc():
    model = _pymc_model()
    dlogp = model.compile_dlogp(jacobian=True)
    errs, errs_mc = [], []
    for seed in range(3):
        posterior = build(seed)
        fit = posterior.sample(num_chains=2, num_samples=300, num_warmup=300)
        idata = pymc_cv.from_pystan(fit, posterior)
        assert idata.score.attrs["score_backend"].startswith("pystan")
        X = idata.unconstrained_posterior["unconstrained"].values.reshape(-1, 3)
        G = idata.score["unconstrained"].values.reshape(-1, 3)
        # Stan's unconstrained order (p, lambda, mu) is PyMC's value variables' order here
        assert [v.name for v in model.value_vars] == ["p_logodds__", "lambda_log__", "mu"]
        for i in range(0, X.shape[0], 60):
            point = {"p_logodds__": X[i, 0], "lambda_log__": X[i, 1], "mu": X[i, 2]}
            np.testing.assert_allclose(G[i], dlogp(point), rtol=1e-6, atol=1e-8)
        # the unconstrained draws line up with the posterior draws
        np.testing.assert_allclose(X[:, 2], idata.posterior["mu"].values.reshape(-1), rtol=0, atol=1e-12)
        table = pymc_cv.summary(idata, var_names=list(TRUTH), progressbar=False)
        for name, truth in TRUTH.items():
            errs.append(abs(table.loc[name, "cv_mean"] - truth))
            errs_mc.append(abs(table.loc[name, "mean"] - truth))
    assert np.mean(errs) <= 0.3 * np.mean(errs_mc)


def _write_cmdstan_csv(path, names, draws, chain_id, lp):
    """Stan CSV as CmdStan writes it (the header lines cmdstanpy.from_csv reads), with the log
    density ``lp`` Stan recorded at each draw."""
    n = draws.shape[0]
    lines = [
        "# stan_version_major = 2", "# stan_version_minor = 36", "# stan_version_patch = 0",
        "# model = beta_binomial_normal_model", "# method = sample (Default)", "#   sample",
        f"#     num_samples = {n}", "#     num_warmup = 300", "#     save_warmup = false (Default)",
        "#     thin = 1 (Default)", "#     adapt", "#       engaged = true (Default)",
        "#       gamma = 0.05 (Default)", "#       delta = 0.8 (Default)", "#       kappa = 0.75 (Default)",
        "#       t0 = 10 (Default)", "#       init_buffer = 75 (Default)", "#       term_buffer = 50 (Default)",
        "#       window = 25 (Default)", "#     algorithm = hmc (Default)", "#       hmc",
        "#         engine = nuts (Default)", "#           nuts", "#             max_depth = 10 (Default)",
        "#         metric = diag_e (Default)", "#         stepsize = 1 (Default)",
        "#         stepsize_jitter = 0 (Default)", "#     num_chains = 1 (Default)", f"# id = {chain_id}",
        "# output",
        f"#   file = {path.name}",
        ",".join(["lp__", "accept_stat__", "stepsize__", "treedepth__", "n_leapfrog__", "divergent__", "energy__"]
                 + names),
        "# Adaptation terminated", "# Step size = 0.8", "# Diagonal elements of inverse mass matrix:",
        "# " + ", ".join(["1"] * len(names)),
    ]
    for row, lp_row in zip(draws, lp):
        lines.append(",".join([repr(float(lp_row)), "0.9", "0.8", "2", "3", "0", "10"] + [repr(float(v)) for v in row]))
    lines += ["# ", "#  Elapsed Time: 0.01 seconds (Warm-up)", "#                0.01 seconds (Sampling)",
              "#                0.02 seconds (Total)", "# "]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_cmdstanpy_fit_from_csv_gets_the_same_scores(posterior, tmp_path):
    """No CmdStan here (its installer downloads): a CmdStanPy fit read from Stan CSV files goes
    through the PyStan gradient route and must give the scores from_pystan gives."""
    cmdstanpy = pytest.importorskip("cmdstanpy")
    fit = posterior.sample(num_chains=2, num_samples=100, num_warmup=300)
    ref = pymc_cv.from_pystan(fit, posterior)
    names = ["p", "lambda", "mu"]
    post = ref.posterior
    files = []
    for c in range(2):
        draws = np.column_stack([post[n].values[c] for n in names])
        files.append(tmp_path / f"chain-{c + 1}.csv")
        _write_cmdstan_csv(files[-1], names, draws, c + 1, ref.sample_stats["lp"].values[c])
    csv_fit = cmdstanpy.from_csv([str(f) for f in files])
    idata = pymc_cv.from_cmdstanpy(csv_fit, model=str(PROGRAM), data=DATA)
    assert "CmdStan's log_prob not used" in idata.score.attrs["score_backend"]
    np.testing.assert_allclose(idata.score["unconstrained"].values, ref.score["unconstrained"].values, rtol=1e-9)
    np.testing.assert_allclose(idata.unconstrained_posterior["unconstrained"].values,
                               ref.unconstrained_posterior["unconstrained"].values, rtol=1e-9)
    table = pymc_cv.summary(idata, var_names=["p"], progressbar=False)
    assert abs(table.loc["p", "cv_mean"] - TRUTH["p"]) < 3 * table.loc["p", "cv_mcse"] + 1e-6
    with pytest.raises(ValueError, match="needs the Stan program"):
        pymc_cv.from_cmdstanpy(csv_fit)
    with pytest.raises(ValueError, match=r"does not build with the data \(no data= was given\).* Pass data= "):
        pymc_cv.from_cmdstanpy(csv_fit, model=str(PROGRAM))
    # the same program with other data: Stan's recorded lp__ says the draws were not sampled from it
    from pymc_cv.core.density_check import DrawsModelMismatchError

    with pytest.raises(DrawsModelMismatchError, match="not the points Stan visited"):
        pymc_cv.from_cmdstanpy(csv_fit, model=str(PROGRAM), data={**DATA, "y": [0.0, 2.0, 3.5]})


def _write_diagnostic_file(path, names, q, g, lp, digits=17, warmup=0):
    """A CmdStan diagnostic file (``diagnostic_file=``, CmdStanPy's ``save_latent_dynamics=True``) as
    CmdStan documents it: the sampler's columns, the unconstrained point q, the momenta p_ and the
    gradients g_ of the potential -log p; ``warmup`` saved warm-up rows come first."""
    def number(v):
        return f"{v:.{digits - 1}e}"

    header = ["lp__", "accept_stat__", "stepsize__", "treedepth__", "n_leapfrog__", "divergent__", "energy__"]
    lines = ["# model = beta_binomial_normal_model", "# method = sample (Default)",
             ",".join(header + names + [f"p_{n}" for n in names] + [f"g_{n}" for n in names])]
    rows = [(lp[0] - 5.0, q[0] + 0.5, g[0])] * warmup + list(zip(lp, q, g))
    for lp_row, q_row, g_row in rows:
        lines.append(",".join([repr(float(lp_row)), "0.9", "0.8", "2", "3", "0", "10"] + [number(v) for v in q_row]
                              + ["0.1"] * len(names) + [number(v) for v in g_row]))
    lines += ["# ", "#  Elapsed Time: 0.01 seconds (Warm-up)"]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_cmdstan_diagnostic_files_give_the_scores_without_building_the_program(posterior, tmp_path):
    """CmdStan keeps each draw's unconstrained point and gradient in its diagnostic file: read there,
    the scores are Stan's own, with no PyStan build, and equal from_pystan's."""
    cmdstanpy = pytest.importorskip("cmdstanpy")
    from pymc_cv.core.density_check import DrawsModelMismatchError

    fit = posterior.sample(num_chains=2, num_samples=200, num_warmup=300)
    ref = pymc_cv.from_pystan(fit, posterior)
    names, post = ["p", "lambda", "mu"], ref.posterior
    lp = ref.sample_stats["lp"].values
    X, G = ref.unconstrained_posterior["unconstrained"].values, ref.score["unconstrained"].values
    csv, diag, rounded = [], [], []
    for c in range(2):
        draws = np.column_stack([post[n].values[c] for n in names])
        csv.append(tmp_path / f"chain-{c + 1}.csv")
        _write_cmdstan_csv(csv[-1], names, draws, c + 1, lp[c])
        diag.append(tmp_path / f"diagnostic-{c + 1}.csv")
        _write_diagnostic_file(diag[-1], names, X[c], -G[c], lp[c], warmup=5 * c)
        rounded.append(tmp_path / f"rounded-{c + 1}.csv")
        _write_diagnostic_file(rounded[-1], names, X[c], -G[c], lp[c], digits=6)
    csv_fit = cmdstanpy.from_csv([str(f) for f in csv])
    idata = pymc_cv.from_cmdstanpy(csv_fit, diagnostic_files=[str(f) for f in diag])
    assert "diagnostic file" in idata.score.attrs["score_backend"]
    np.testing.assert_allclose(idata.score["unconstrained"].values, G, rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(idata.unconstrained_posterior["unconstrained"].values, X, rtol=1e-15)
    table = pymc_cv.summary(idata, var_names=["p", "mu"], progressbar=False)
    for name in ("p", "mu"):
        assert abs(table.loc[name, "cv_mean"] - TRUTH[name]) < 3 * table.loc[name, "cv_mcse"] + 1e-9
    with pytest.raises(ValueError, match=r"6 significant digits.*sig_figs=18"):
        pymc_cv.from_cmdstanpy(csv_fit, diagnostic_files=[str(f) for f in rounded])
    with pytest.raises(DrawsModelMismatchError, match="not in chain order"):
        pymc_cv.from_cmdstanpy(csv_fit, diagnostic_files=[str(f) for f in diag[::-1]])
    with pytest.warns(UserWarning, match="model= and data= not used"):
        pymc_cv.from_cmdstanpy(csv_fit, model=str(PROGRAM), data=DATA, diagnostic_files=[str(f) for f in diag])


@pytest.mark.slow
def test_thermodynamic_integration_from_pystan_fits():
    from scipy import stats

    from pymc_cv.evidence import power_ladder
    from pymc_cv.stan.evidence import ti_from_pystan

    # the program of the from_pystan and ti_from_pystan doctests, character for character: httpstan
    # builds a program once per text, and a build takes a minute on a fresh machine
    program = ("data { int<lower=1> N; vector[N] y; real<lower=0, upper=1> temperature; } "
               "parameters { real mu; } "
               "model { mu ~ normal(0, 2); target += temperature * normal_lpdf(y | mu, 1); }")
    y = np.array([0.3, 1.1, 0.8, 1.9])
    truth = stats.multivariate_normal(np.zeros(4), np.eye(4) + 4.0 * np.ones((4, 4))).logpdf(y)
    t = power_ladder(11)
    data = {"N": 4, "y": y.tolist(), "temperature": 1.0}
    fits = []
    for i, ti in enumerate(t):
        post = stan.build(program, data={**data, "temperature": float(ti)}, random_seed=i)
        fits.append(post.sample(num_chains=2, num_samples=500, num_warmup=300))
    res = ti_from_pystan(fits, program, data, t, method="cti", progressbar=False)
    # log p(y|x) is quadratic and every rung Gaussian, so ZV-CVs make the rung means exact; the
    # variances in the trapezoid's correction are quartic and keep a sampling error: with 100 draws
    # per chain one badly mixed rung moved the result by 0.011 (exact moments: 0.003 off)
    assert abs(res.log_evidence - truth) < 0.01
    assert abs(res.log_evidence - truth) <= 3 * res.se + 1e-3
    assert abs(res.log_evidence - truth) < abs(res.mc_log_evidence - truth)
    with pytest.raises(ValueError, match="temperature"):
        ti_from_pystan(fits, program, {"N": 4, "y": y.tolist()}, t, progressbar=False)


def test_each_draw_is_split_for_stan_as_httpstan_splits_it():
    """Draws are handed to Stan's transform_inits pre-split (Stan's column-major order, float values):
    the same lists httpstan's own split of the draw's dict gives, for scalars, vectors and matrices."""
    import xarray as xr
    from httpstan.utils import _split_data

    from pymc_cv.stan.convert import _constrained_draws

    rng = np.random.default_rng(3)
    post = xr.Dataset({"s": (("chain", "draw"), rng.normal(size=(2, 5))),
                       "v": (("chain", "draw", "i"), rng.normal(size=(2, 5, 3))),
                       "m": (("chain", "draw", "r", "c"), rng.normal(size=(2, 5, 2, 4)))})
    draws = _constrained_draws(post, ["m", "s", "v"])
    assert len(draws) == 10
    for k, draw in enumerate(draws):
        c, j = divmod(k, 5)
        assert draw["m"] == post["m"].values[c, j].tolist()
        names, values, dims, *ints = _split_data(dict(draw))
        assert draw.split[0] == names and draw.split[2] == [tuple(d) for d in dims] and draw.split[3:] == tuple(ints)
        assert draw.split[1] == [float(v) for v in values]
        assert draw.split[1][:8] == post["m"].values[c, j].ravel(order="F").tolist()
    bare = _constrained_draws(post, ["m", "s", "v"], values=False)
    assert all(len(b) == 0 and b.split == d.split for b, d in zip(bare, draws))


@pytest.mark.slow
def test_van_der_pol_program_matches_the_pymc_example():
    """stan_models/van_der_pol.stan and examples/van_der_pol_evidence.py define the same likelihood
    and prior (Stan's tolerance-controlled RK45 against an accurate solve_ivp, to 1e-4 nats)."""
    from scipy import stats

    from pymc_cv.stan.convert import _StanDensity

    vdp = load_example("van_der_pol_evidence")
    y = vdp.simulate(0)
    program = (Path(__file__).parents[1] / "stan_models" / "van_der_pol.stan").read_text()
    data = {"S": 10, "s_obs": list(map(float, vdp.S_OBS[1:])), "y": y.tolist()}
    hot = _StanDensity(stan.build(program, data={**data, "temperature": 1.0}))
    cold = _StanDensity(stan.build(program, data={**data, "temperature": 0.0}))
    for x in (0.7, 1.0, 1.4):
        u = hot.unconstrain({"x": x})
        assert u[0] == pytest.approx(np.log(x))
        loglik = hot.log_prob(u) - cold.log_prob(u)
        assert loglik == pytest.approx(vdp.loglik_numpy(x, y, vdp.solve_exact), abs=1e-4)
        # prior on the log scale (Jacobian included): log N(log x; 0, 0.25)
        assert cold.log_prob(u) == pytest.approx(stats.norm(0, 0.25).logpdf(np.log(x)), abs=1e-10)


@pytest.mark.slow
def test_hierarchical_gp_program_matches_the_pymc_example():
    gp = load_example("hierarchical_gp_metacv")
    z, y, z_all = gp.load()
    z_test = z_all[:5]
    program = (Path(__file__).parents[1] / "stan_models" / "hierarchical_gp.stan").read_text()
    data = {"Q": z.size, "z": z.tolist(), "y": y.tolist(), "noise": gp.NOISE, "M": 5, "z_test": z_test.tolist()}
    fit = stan.build(program, data=data, random_seed=1).sample(num_chains=1, num_samples=20, num_warmup=50)
    amp, ls = fit["amp"].ravel(), fit["ls"].ravel()
    np.testing.assert_allclose(fit["predictive_mean"].T, gp.predictive_means(amp, ls, z, y, z_test), rtol=1e-6,
                               atol=1e-9)


@pytest.mark.slow
def test_lotka_volterra_program_matches_the_pymc_model():
    """stan_models/lotka_volterra.stan and examples/lotka_volterra.py: the same log density (up to a
    constant) and the same gradient at the same points of R^8."""
    from pymc_cv.stan.convert import _StanDensity

    lv = load_example("lotka_volterra")
    years, hare, lynx = lv.load_data()
    density = _StanDensity(stan.build(lv.STAN_PROGRAM.read_text(), data=lv.stan_data(years, hare, lynx)))
    model = lv.build_model(years, hare, lynx)
    logp, dlogp = model.compile_logp(), model.compile_dlogp()
    rng = np.random.default_rng(0)
    base = np.array([lv.INIT[k] for k in ("log_alpha", "log_beta", "log_gamma", "log_delta")] +
                    list(lv.INIT["log_v0"]) + list(lv.INIT["log_sigma"]))
    points = [base + 0.05 * rng.normal(size=8) for _ in range(3)]
    names = ["log_alpha", "log_beta", "log_gamma", "log_delta"]

    def as_point(x):
        return {**{n: x[i] for i, n in enumerate(names)}, "log_v0": x[4:6], "log_sigma": x[6:8]}

    stan_lp = [density.log_prob(x) for x in points]
    pymc_lp = [float(logp(as_point(x))) for x in points]
    for k in (1, 2):  # Stan's ~ drops constants: compare differences
        assert stan_lp[k] - stan_lp[0] == pytest.approx(pymc_lp[k] - pymc_lp[0], abs=1e-8)
    for x in points:
        np.testing.assert_allclose(density.grad(x), dlogp(as_point(x)), rtol=1e-8, atol=1e-8)


def test_unconstrained_draws_from_recovered_transforms_equal_stans_at_every_draw(posterior):
    """p (lower and upper bound), lambda (lower) and mu (none): from_pystan unconstrains the draws with
    the transforms recovered at a few of them, and they are Stan's transform_inits at every draw."""
    from pymc_cv.stan import convert

    fit = posterior.sample(num_chains=2, num_samples=300, num_warmup=300)
    idata = pymc_cv.from_pystan(fit, posterior)
    density = convert._StanDensity(posterior)
    post = pymc_cv.compat.group(idata, "posterior")
    with density.batch():
        draws = convert._constrained_draws(post, list(posterior.param_names), values=False)
        assert convert._unconstrained_elementwise(density, draws) is not None
        stan_u = np.array([density.direct.transform_inits(density.data, d) for d in draws])
    X = idata.unconstrained_posterior["unconstrained"].values.reshape(-1, 3)
    np.testing.assert_allclose(X, stan_u, rtol=1e-13, atol=1e-13)
    G = idata.score["unconstrained"].values.reshape(-1, 3)
    with density.batch():
        np.testing.assert_allclose(G[::50], [density.grad(u) for u in stan_u[::50]], rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_bridge_from_pystan_matches_the_closed_form():
    """Bridge sampling from a PyStan fit of a program that keeps its normalising constants."""
    from scipy import integrate, stats

    data = {"N": 3, "y": [0.3, -0.5, 1.2], "M": 2, "z": [0.5, -1.0]}
    program = (Path(__file__).parent / "stan" / "normal_evidence.stan").read_text()
    posterior = stan.build(program, data=data, random_seed=3)
    fit = posterior.sample(num_chains=2, num_samples=1000)
    res = pymc_cv.bridge_from_pystan(fit, posterior, random_seed=1)
    mean_part = stats.multivariate_normal(np.zeros(3), np.eye(3) + 4.0).logpdf(data["y"])
    sigma_part = np.log(integrate.quad(lambda s: stats.halfnorm.pdf(s) * np.prod(stats.norm.pdf(data["z"], 0, s)),
                                       0, 50, epsabs=0, epsrel=1e-12)[0])
    assert res.reliable and abs(res.log_evidence - (mean_part + sigma_part)) < 3 * res.se < 0.03


def test_bridge_from_pystan_refuses_programs_that_drop_constants(posterior):
    with pytest.raises(ValueError, match=r"target \+= normal_lpdf\(y \| mu, sigma\)"):
        pymc_cv.bridge_from_pystan(None, posterior)
