"""Long chains: control variates fitted on one draw in t of each chain and evaluated at all of them, and
the Stein check's ESS from the head of the chains."""

import numpy as np
import pytest
from chains import ar1_chain

import pymc_cv
from pymc_cv.core import estimate
from pymc_cv.core.standard_errors import effective_sample_sizes, segment_effective_sample_sizes


def test_one_draw_in_t_of_each_chain_from_its_first():
    chain = np.repeat([0, 1, 2], 7)
    np.testing.assert_array_equal(estimate._every_tth(21, chain, 3), [0, 3, 6, 7, 10, 13, 14, 17, 20])
    # chains interleaved: positions count within each chain
    chain = np.tile([5, 9], 6)
    np.testing.assert_array_equal(estimate._every_tth(12, chain, 4), [0, 1, 8, 9])
    np.testing.assert_array_equal(estimate._every_tth(10, None, 4), [0, 4, 8])


def _gaussian_chains(n_chain, n_draw, m, sd, rho, seed):
    rng = np.random.default_rng(seed)
    z = np.stack([np.concatenate([ar1_chain(rng, n_draw, rho) for _ in range(n_chain)]) for _ in m], axis=1)
    X = m + sd * z
    return X, -(X - m) / sd**2, np.repeat(np.arange(n_chain), n_draw)


def test_long_chains_are_fitted_on_a_thinned_subset_and_estimated_on_all_draws():
    m, sd = np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.5, 0.6])
    X, S, chain = _gaussian_chains(4, 11_000, m, sd, 0.3, 0)
    assert X.shape[0] > 2 * estimate.FIT_DRAWS
    Y = np.column_stack([X[:, 0], X[:, 1] ** 2, np.sin(X[:, 2])])
    res = pymc_cv.cv_estimate(Y, X, S, method="zv", chain=chain)
    assert any("one draw in 3 of each chain (14668 of 44000)" in note for note in res.notes)
    # the ZV-CVs of x and x^2 under a Gaussian are exact: f - L phi is their mean at every one of the draws
    np.testing.assert_allclose(res.estimate[:2], [m[0], m[1] ** 2 + sd[1] ** 2], rtol=1e-9)
    truth = np.sin(m[2]) * np.exp(-sd[2] ** 2 / 2)
    assert abs(res.estimate[2] - truth) <= 4 * res.se[2]
    assert res.se[2] < 0.3 * res.mc_se[2]


def test_a_thinned_fit_agrees_with_the_fit_on_all_draws(monkeypatch):
    m, sd = np.zeros(2), np.ones(2)
    X, S, chain = _gaussian_chains(4, 10_500, m, sd, 0.5, 1)
    y = np.exp(X[:, 0] / 2) + X[:, 1] ** 3  # neither exact for a ZV basis
    thinned = pymc_cv.cv_estimate(y, X, S, method="zv", chain=chain)
    monkeypatch.setattr(estimate, "FIT_DRAWS", 10**9)
    full = pymc_cv.cv_estimate(y, X, S, method="zv", chain=chain)
    assert not any("one draw in" in note for note in full.notes)
    assert abs(thinned.estimate - full.estimate) <= 2 * full.se
    assert thinned.se == pytest.approx(full.se, rel=0.5)
    assert abs(thinned.estimate - np.exp(1 / 8)) <= 4 * thinned.se


def test_the_head_of_long_chains_gives_their_ess():
    rng = np.random.default_rng(2)
    F = np.column_stack([np.concatenate([ar1_chain(rng, 50_000, rho) for _ in range(4)]) for rho in (0.0, 0.5, -0.3)])
    chain = np.repeat(np.arange(4), 50_000)
    full = effective_sample_sizes(F, chain)
    head = segment_effective_sample_sizes(F, chain, 40_000)
    np.testing.assert_allclose(head, full, rtol=0.1)
    # AR(1): n (1 - rho) / (1 + rho), capped at n
    np.testing.assert_allclose(head, [200_000, 200_000 / 3, 200_000], rtol=0.1)
    np.testing.assert_array_equal(segment_effective_sample_sizes(F[:30_000], chain[:30_000], 40_000),
                                  effective_sample_sizes(F[:30_000], chain[:30_000]))


def test_only_candidates_best_on_some_integrand_are_evaluated_at_every_draw():
    from pymc_cv.core.finalize import Candidate

    rng = np.random.default_rng(3)
    e = rng.normal(size=(100, 3))
    a = Candidate("a", np.zeros(3), e * [1.0, 2.0, 2.0], None)  # best on the first
    b = Candidate("b", np.zeros(2), e[:, 1:] * [1.0, 3.0], None, columns=np.array([1, 2]))  # best on the second
    c = Candidate("c", np.zeros(3), e * [3.0, 3.0, 2.5], None)  # nowhere
    d = Candidate("d", np.zeros(1), e[:, 2:] * 1.5, None, columns=np.array([2]))  # best on the third
    kept = estimate._best_somewhere([a, b, c, d], 3)
    assert [k.name for k in kept] == ["a", "b", "d"]
