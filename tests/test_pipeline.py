"""The pipeline every estimator runs (core/pipeline.py): what it marks, and where."""

import numpy as np
import pytest

from pymc_cv.core import pipeline
from pymc_cv.core.finalize import Candidate


def _two_integrands(rng, n=400):
    """Column 0 is a CV's easy case (f = x, known exactly by g = x); column 1 is noise."""
    x = rng.normal(size=(n, 1))
    Y = np.column_stack([x[:, 0], rng.normal(size=n)])
    return x, Y


def _exact_for_first_column(Y):
    def solver(notes):
        notes.append("solver ran")
        resid = np.column_stack([1e-3 * np.ones(Y.shape[0]) * np.sign(np.arange(Y.shape[0]) % 2 - 0.5),
                                 Y[:, 1] - Y[:, 1].mean()])
        return [Candidate("exact", np.array([0.0, Y[:, 1].mean()]), resid, resid)]
    return solver


def test_a_cv_only_finding_marks_the_rows_with_a_cv_estimate_and_none_other():
    rng = np.random.default_rng(0)
    x, Y = _two_integrands(rng)
    findings = [pipeline.Finding("heavy tails", slice(None), cv_only=True)]
    res = pipeline.run(Y, None, _exact_for_first_column(Y), findings)
    assert list(res.method) == ["exact", "mc"]
    assert list(res.se_reliable) == [False, True]
    assert res.notes[0] == "heavy tails" and "solver ran" in res.notes


def test_findings_read_in_order_and_mark_their_rows():
    rng = np.random.default_rng(1)
    x, Y = _two_integrands(rng)
    findings = [pipeline.Finding("first", 1), pipeline.Finding("second", slice(None), cv_only=True)]
    res = pipeline.run(Y, None, _exact_for_first_column(Y), findings)
    assert res.notes[:2] == ["first", "second"]
    assert list(res.se_reliable) == [False, False]


def test_chains_that_disagree_are_marked_on_their_row_only():
    rng = np.random.default_rng(2)
    x, Y = _two_integrands(rng)
    chain = np.repeat([0, 1], 200)
    Y[chain == 1, 1] += 3.0  # the second integrand's chains sit apart
    res = pipeline.run(Y, chain, _exact_for_first_column(Y))
    assert list(res.se_reliable) == [True, False]
    assert res.notes[0].startswith("integrand 1: its chains disagree")



def test_only_the_mixing_columns_are_checked():
    rng = np.random.default_rng(2)
    x, Y = _two_integrands(rng)
    chain = np.repeat([0, 1], 200)
    Y[chain == 1, 1] += 3.0
    skipped = pipeline.run(Y, chain, _exact_for_first_column(Y), mixing_columns=np.array([0]))
    assert skipped.se_reliable.all() and not any("disagree" in n for n in skipped.notes)
    checked = pipeline.run(Y, chain, _exact_for_first_column(Y), mixing_columns=np.array([1]))
    assert list(checked.se_reliable) == [True, False] and checked.notes[0].startswith("integrand 1: its chains")
    # the R-hats the check computed are kept, ArviZ's own, and nan where no check was made
    from pymc_cv import compat

    by_chain = np.stack([Y[chain == c].T for c in (0, 1)], axis=1)
    assert np.isnan(checked.rhat[0]) and checked.rhat[1] == compat.rhats(by_chain[1:])[0] > 1.5
    everything = pipeline.run(Y, chain, _exact_for_first_column(Y))
    np.testing.assert_allclose(everything.rhat, compat.rhats(by_chain), rtol=1e-12)
    assert np.isnan(pipeline.run(Y, None, _exact_for_first_column(Y)).rhat).all()  # no chains: nothing judged
    # checked a block of columns at a time: the same R-hats and the same flags as all at once
    import unittest.mock

    with unittest.mock.patch.object(pipeline, "_MIXING_BLOCK", 1):
        one_by_one = pipeline.run(Y, chain, _exact_for_first_column(Y))
    np.testing.assert_array_equal(one_by_one.rhat, everything.rhat)
    assert list(one_by_one.se_reliable) == list(everything.se_reliable) and one_by_one.notes == everything.notes

def test_scores_of_another_target_are_an_error_and_a_mild_mismatch_a_finding():
    import pytest

    from pymc_cv.core.score_check import ScoreMismatchError

    rng = np.random.default_rng(3)
    x = rng.normal(size=(2000, 2))
    with pytest.raises(ScoreMismatchError, match="for task 4"):
        pipeline.check_scores([pipeline.Target(x, x, None, rows=4, label="task 4")])  # wrong sign
    assert pipeline.check_scores([pipeline.Target(x, -x, None)]) == []
    tails = pipeline.check_tails([pipeline.Target(rng.standard_t(2, size=(2000, 1)), None, None, rows=1,
                                                  label="task 1")])
    assert len(tails) == 1 and tails[0].rows == 1 and tails[0].cv_only and tails[0].note.startswith("task 1: ")


def test_squeeze_gives_scalars_and_the_one_fit():
    rng = np.random.default_rng(4)
    x, Y = _two_integrands(rng)
    res = pipeline.squeeze(pipeline.run(Y[:, :1], None, _exact_for_first_column(np.column_stack([Y[:, 0], Y[:, 0]]))))
    assert np.ndim(res.estimate) == 0 and res.method == "exact"


def test_a_fit_whose_se_with_its_jackknife_bias_is_many_times_mcs_reports_the_mc_mean():
    """Held-out residuals a tenth of f's beat MC 100x, but a jackknife bias of 3 sd (a fit that moves
    with the draws it saw) leaves an se 60x MC's: the MC mean is reported, the note says why."""
    rng = np.random.default_rng(1)
    n = 400
    y = rng.normal(size=n)
    resid = 0.1 * rng.normal(size=n)

    def solver(notes):
        return [Candidate("jumpy", np.array([y.mean() + 3.0]), resid[:, None], resid[:, None],
                          jackknife_bias=np.array([3.0]))]

    res = pipeline.run(y[:, None], None, solver, [])
    assert res.method[0] == "mc" and res.estimate[0] == y.mean()
    assert res.se[0] == res.mc_se[0] and res.variance_reduction[0] < 1e-2
    assert any("x MC's" in n and "reporting the MC mean" in n for n in res.notes)
    # a bias that leaves the se below twice MC's (conservative as CV se are) keeps the fit
    def steady(notes):
        return [Candidate("steady", np.array([y.mean() + 0.05]), resid[:, None], resid[:, None],
                          jackknife_bias=np.array([0.05]))]
    kept = pipeline.run(y[:, None], None, steady, [])
    assert kept.method[0] == "steady" and res.mc_se[0] < kept.se[0] < 2 * res.mc_se[0]


def test_the_residual_khat_is_left_out_on_request_and_nothing_else_moves():
    import pymc_cv

    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 2))
    Y = np.column_stack([np.sin(x[:, 0]) + x[:, 1] ** 2, np.exp(x[:, 0] / 2)])
    chain = np.repeat([0, 1], 150)
    full = pymc_cv.cv_estimate(Y, x, -x, chain=chain)
    lean = pymc_cv.cv_estimate(Y, x, -x, chain=chain, residual_khat=False)
    assert np.all(np.isfinite(full.khat)) and np.all(np.isnan(lean.khat))
    for key in ("estimate", "se", "mc_se", "variance_reduction", "method", "se_reliable"):
        assert np.array_equal(getattr(full, key), getattr(lean, key)), key
    assert full.notes == lean.notes


def test_the_residuals_ess_is_skipped_only_where_the_integrands_ess_is_n_and_nothing_reported_moves():
    """Where an integrand's ESS is capped at n the held-out se is std(r) / sqrt(n) whatever the
    residuals' ESS, so finalize does not compute it; elsewhere the residuals' ESS must be used."""
    from chains import ar1_chain

    from pymc_cv.core import finalize as fin
    from pymc_cv.core.standard_errors import effective_sample_sizes

    rng = np.random.default_rng(3)
    chains, draws = 4, 300
    chain = np.repeat(np.arange(chains), draws)
    ar = lambda rho: np.concatenate([ar1_chain(rng, draws, rho) for _ in range(chains)])  # noqa: E731
    # integrands 0, 1 antithetic (ESS > n, capped); 2, 3 slow (ESS < n); residuals of either kind
    Y = np.column_stack([ar(-0.5), ar(-0.5), ar(0.6), ar(0.6)])
    resid = 0.3 * np.column_stack([ar(0.5), ar(-0.5), ar(-0.5), ar(0.5)])
    mc_ess = effective_sample_sizes(Y, chain)
    assert list(mc_ess == chain.size) == [True, True, False, False]
    asked = []

    def counting(X, c=None):
        asked.append(X.shape[1])
        return effective_sample_sizes(X, c)

    cand = Candidate("fit", Y.mean(0) + 0.01, resid - resid.mean(0), resid - resid.mean(0))
    orig = fin.effective_sample_sizes
    fin.effective_sample_sizes = counting
    try:
        res = fin.finalize(Y, chain, [cand])
    finally:
        fin.effective_sample_sizes = orig
    assert asked == [4, 2]  # the integrands' ESS, then the residuals' of the two uncapped integrands
    r = resid - resid.mean(0)
    full = effective_sample_sizes(r, chain)
    mcse = Y.std(0, ddof=1) / np.sqrt(mc_ess)
    se_held = np.minimum(r.std(0, ddof=1) / np.sqrt(full), mcse * r.std(0) / Y.std(0))
    np.testing.assert_allclose(res.variance_reduction, (mcse / se_held) ** 2, rtol=1e-12)
    # the residuals' own ESS decides the slow integrands: the one with antithetic residuals gains by it
    assert full[2] > mc_ess[2] and se_held[2] < mcse[2] * r[:, 2].std() / Y[:, 2].std()


@pytest.mark.parametrize("d, local", [(3, False), (60, True)])
def test_candidates_assessed_for_all_columns_at_once_report_what_one_column_at_a_time_does(monkeypatch, d, local):
    """Chains of a correlated Gaussian: ZV fits (influence), kernel fits (d = 3) and local ZV fits (their
    jackknife, d = 60), with a constant integrand and one the draws cannot explain.  Every number of the
    result equals the column-by-column assessment's to 1e-12."""
    import pymc_cv
    from pymc_cv.core import finalize as fin
    from pymc_cv.core.local_zv import LocalCoordinates

    rng = np.random.default_rng(7)
    chain = np.repeat(np.arange(4), 300)
    z = np.column_stack([np.concatenate([0.5 * np.convolve(rng.normal(size=302), [1, 1, 1], "valid")
                                         for _ in range(4)]) for _ in range(d)])
    x, s = z, -z / np.var(z, axis=0)
    Y = np.column_stack([x[:, 0], x[:, 1] ** 2, np.sin(x[:, 0]) + x[:, 2], np.ones(x.shape[0]),
                         rng.normal(size=x.shape[0])])
    kw = dict(chain=chain, check_scores=False)
    if local:
        kw["local"] = LocalCoordinates(np.array([0, 1, 2, -1, 3]), np.array([d - 1]))

    def run():
        return pymc_cv.cv_estimate(Y, x, s, **kw)

    batched = run()
    monkeypatch.setattr(fin, "_batched", lambda *args: False)
    one_by_one = run()
    for key in ("estimate", "se", "mc_estimate", "mc_se", "variance_reduction", "jackknife_bias"):
        np.testing.assert_allclose(getattr(batched, key), getattr(one_by_one, key), rtol=1e-12, atol=0, err_msg=key)
    assert list(batched.method) == list(one_by_one.method) and batched.notes == one_by_one.notes
    assert len(set(batched.method)) >= 2  # more than one kind of fit was weighed
