"""ArviZ's diagnostics batched over rows (``pymc_cv.batched_diagnostics``) against ArviZ's own, row by row,
on the installed ArviZ (0.x or 1.x)."""

import numpy as np
import pytest

from chains import ar1_chain
from pymc_cv import batched_diagnostics as bd
from pymc_cv import compat


def _arviz(row, name, **kw):
    """ArviZ's own diagnostic ``name`` ("ess", "rhat" or "mcse") of one (chain, draw) row."""
    with compat._mcse_function():  # ArviZ's warnings silenced, ArviZ 0.x on its numpy path
        if compat.arviz_major() >= 1:
            with compat._array_stats() as stats:
                return float(getattr(stats, name)(row, **kw))
        import arviz as az

        with compat._numpy_path():
            return float(np.ravel(getattr(az, name)(row, **kw))[0])


def _rows(n_draw, n_chain=4, seed=0):
    rng = np.random.default_rng(seed + n_draw)
    rows = [np.stack([ar1_chain(rng, n_draw, phi) for _ in range(n_chain)]) for phi in (-0.6, 0.0, 0.5, 0.95, 0.999)]
    rows.append(np.stack([np.sin(np.arange(n_draw) / 7.0 + c) for c in range(n_chain)]))  # periodic
    rows.append(np.round(rows[2] * 2) / 2)  # ties, as a discrete quantity has them
    rows.append(np.exp(2 * rows[1]))  # skewed
    rows.append(rows[3] + np.arange(n_chain)[:, None])  # chains that disagree
    return np.stack(rows)


@pytest.mark.parametrize("n_draw, n_chain", [(4, 4), (5, 2), (101, 4), (1000, 4), (300, 1)])
def test_batched_diagnostics_are_arvizs(n_draw, n_chain):
    ary = _rows(n_draw, n_chain)
    cases = [(bd.ess_mean(ary), "ess", {"method": "mean"}), (bd.ess_bulk(ary), "ess", {"method": "bulk"}),
             (bd.mcse_mean(ary), "mcse", {"method": "mean"}), (bd.mcse_sd(ary), "mcse", {"method": "sd"})]
    cases += [(bd.mcse_quantile(ary, p), "mcse", {"method": "quantile", "prob": p}) for p in (0.03, 0.5, 0.97)]
    if n_chain > 1:
        cases.append((bd.rhat_rank(ary), "rhat", {"method": "rank"}))
    agreeing = compat.batched_agreeing()
    # ArviZ 0.23 and arviz-stats 1.3 agree on every one; another ArviZ's formula differs where it is left out
    if compat.arviz_major() >= 1 or tuple(map(int, az_version().split(".")[:2])) >= (0, 23):
        assert len(agreeing) == 6
    for got, name, kw in cases:
        want = np.array([_arviz(r, name, **kw) for r in ary])
        if (name, kw["method"]) in agreeing:
            np.testing.assert_allclose(got, want, rtol=1e-9, err_msg=f"{name} {kw}")
    # what the package reports is ArviZ's, batched or not
    probs = (0.03, 0.97)
    want = np.array([[_arviz(r, "mcse", method="mean"), _arviz(r, "mcse", method="sd")]
                     + [_arviz(r, "mcse", method="quantile", prob=p) for p in probs] for r in ary])
    np.testing.assert_allclose(compat.mcse_rows(list(ary), probs), want, rtol=1e-9)
    np.testing.assert_allclose(compat.ess_bulk(ary), [_arviz(r, "ess", method="bulk") for r in ary], rtol=1e-9)
    if n_chain > 1:
        np.testing.assert_allclose(compat.rhats(ary), [_arviz(r, "rhat", method="rank") for r in ary], rtol=1e-9)


def az_version():
    import arviz

    return arviz.__version__


def test_a_constant_row_has_the_ess_of_its_size_and_rows_arviz_must_take_are_said():
    ary = np.full((1, 4, 50), 2.5)
    assert bd.ess_mean(ary)[0] == 200
    assert bd.handles(ary) and not bd.handles(ary[:, :, :3])
    bad = np.ones((2, 4, 50))
    bad[1, 0, 3] = np.nan
    assert not bd.handles(bad)


def test_rank_normalisation_equals_scipys_average_ranks_to_the_last_bit():
    """Rows without ties, with runs of ties (repeated draws, a rounded quantity), constant: the normal
    scores of SciPy's average ranks, as ArviZ computes them, bit for bit."""
    from scipy import stats

    rng = np.random.default_rng(5)
    ary = rng.normal(size=(6, 4, 300))
    ary[1, 1, :7] = ary[1, 0, 3]  # a run of 8 equal values
    ary[2] = np.round(ary[2], 1)
    ary[3] = 2.0
    ary[4, 2, 10:12] = ary[4, 2, 9]
    flat = ary.reshape(6, -1)
    rank = stats.rankdata(flat, method="average", axis=1)
    expected = stats.norm.ppf((rank - 3 / 8) / (flat.shape[1] - 2 * 3 / 8 + 1)).reshape(ary.shape)
    np.testing.assert_array_equal(bd._z_scale(ary), expected)
