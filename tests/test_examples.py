"""The pieces of examples/lotka_volterra.py (the full run is a benchmark, not a test)."""

import numpy as np
from example_modules import load_example
from scipy.integrate import solve_ivp

lv = load_example("lotka_volterra")


def test_data_is_the_hudson_bay_series():
    years, hare, lynx = lv.load_data()
    assert years[0] == 1900 and years[-1] == 1920 and years.size == 21
    assert hare[0] == 30.0 and lynx[0] == 4.0


def test_posthoc_prey_solver_matches_scipy():
    rng = np.random.default_rng(0)
    post = {k: np.full((1, 3), v, dtype=float) for k, v in lv.INIT.items() if np.ndim(v) == 0}
    post = {k: v + 0.05 * rng.normal(size=v.shape) for k, v in post.items()}
    post["log_v0"] = np.array([[[3.5, 1.8], [3.4, 1.9], [3.6, 1.7]]])
    times = [1912.0, 1912.2, 1913.8]
    got = lv.prey_at(post, times, 1900.0)
    for j in range(3):
        a, b, g, d = (np.exp(post[k][0, j]) for k in ("log_alpha", "log_beta", "log_gamma", "log_delta"))
        sol = solve_ivp(lambda t, v: [a * v[0] - b * v[0] * v[1], d * v[0] * v[1] - g * v[1]], (0, 13.8),
                        np.exp(post["log_v0"][0, j]), t_eval=np.array(times) - 1900, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(got[0, j], sol.y[0], rtol=1e-6)


def test_model_has_finite_log_density_and_gradient_at_the_initial_values():
    model = lv.build_model(*lv.load_data())
    point = model.initial_point()
    point.update({k: np.asarray(v, dtype=float) for k, v in lv.INIT.items()})
    assert np.isfinite(model.compile_logp()(point))
    assert np.all(np.isfinite(model.compile_dlogp()(point)))
    assert len(model.value_vars) == 6 and sum(np.size(point[v.name]) for v in model.value_vars) == 8
