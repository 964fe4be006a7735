"""Stan's elementwise unconstraining transforms recovered from a few draws (numpy only)."""

import numpy as np
from scipy.special import logit

from pymc_cv.stan.unconstrain import fit_transforms, matches, probe_draws


def _draws(rng, n=500):
    """Constrained draws of an unbounded, an offset/multiplier, a lower-, an upper- and a
    lower-and-upper-bounded scalar, with Stan's unconstrained values of each."""
    z = rng.normal(size=(n, 5))
    X = np.column_stack([3 + 2 * z[:, 0], 1.5 + 0.3 * z[:, 1], 2 + np.exp(z[:, 2]), -1 - np.exp(z[:, 3]),
                         -2 + 5 / (1 + np.exp(-z[:, 4]))])
    U = np.column_stack([X[:, 0], (X[:, 1] - 1.5) / 0.3, np.log(X[:, 2] - 2), np.log(-1 - X[:, 3]),
                         logit((X[:, 4] + 2) / 5)])
    return X, U


def test_each_kind_of_transform_is_recovered_and_reproduces_stan_at_every_draw():
    rng = np.random.default_rng(0)
    X, U = _draws(rng)
    probes = probe_draws(X, 8, rng)
    # each coordinate's extremes are among the probes: no draw lies outside the matched range
    assert set(np.argmin(X, axis=0)) | set(np.argmax(X, axis=0)) <= set(probes)
    transforms = fit_transforms(X[probes], U[probes])
    assert transforms is not None
    assert transforms.kind.tolist() == [0, 0, 1, 2, 3]
    np.testing.assert_allclose(transforms.a[2:4], [2.0, -1.0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(transforms(X), U, rtol=1e-12, atol=1e-12)
    assert matches(transforms(X), U)


def test_a_bound_that_moves_with_another_parameter_is_not_taken_for_an_elementwise_transform():
    # garch's beta1 has upper = 1 - alpha1: its unconstrained value depends on alpha1 as well
    rng = np.random.default_rng(1)
    alpha = 1 / (1 + np.exp(-rng.normal(size=400)))
    beta = (1 - alpha) / (1 + np.exp(-rng.normal(size=400)))
    X = np.column_stack([alpha, beta])
    U = np.column_stack([logit(alpha), logit(beta / (1 - alpha))])
    probes = probe_draws(X, 8, rng)
    assert fit_transforms(X[probes], U[probes]) is None


def test_a_transform_of_several_coordinates_is_refused():
    # a 3-simplex has 2 unconstrained values: no coordinate-wise map; and a sorted pair (ordered)
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(3), size=300)
    assert fit_transforms(p, p[:, :2]) is None
    a = np.sort(rng.normal(size=(300, 2)), axis=1)
    U = np.column_stack([a[:, 0], np.log(a[:, 1] - a[:, 0])])
    probes = probe_draws(a, 8, rng)
    assert fit_transforms(a[probes], U[probes]) is None


def test_too_few_distinct_values_to_tell_a_transform_are_refused():
    X = np.repeat([[1.0], [2.0], [3.0]], 10, axis=0)
    assert fit_transforms(X, np.log(X)) is None
