"""Stan fits (PyStan 3, CmdStanPy) to InferenceData with the unconstrained draws and scores.

The scores are Stan's own gradient of the log density on the unconstrained space with the
Jacobian of the constraining transforms (``log_prob_grad`` with ``adjust_transform``), and the
unconstrained draws Stan's own ``transform_inits`` of each constrained draw: the same two groups
``compute_scores`` writes for PyMC, so ``pymc_cv.summary`` works unchanged.  Where every constraint
acts on one scalar at a time (bounds, offset and multiplier), ``transform_inits`` is called at a few
dozen draws only, and the transforms it shows there (``unconstrain``), checked at other draws, give
the rest: half the calls.

Both go through the model's compiled httpstan extension module, called directly (0.1 ms a
draw); PyStan's HTTP methods (``unconstrain_pars``, ``grad_log_prob``; ~10 ms a draw) are the
fallback.  A CmdStanPy fit has no compiled model that can give these (CmdStan's ``log_prob``
method returns gradients but not the unconstrained point), so its ``.stan`` program is built with
PyStan as well; httpstan caches builds on disk, so each program compiles once per machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import re
import sys
import warnings
from typing import NamedTuple

import numpy as np

from .. import compat
from ..core.density_check import DrawsModelMismatchError, check_recorded_logp
from ..evidence.rung_moments import RungArrays
from ..idata_groups import CHECKED, PAIRING, UNCHECKED, with_cv_groups
from ..progress import progress_bar
from . import unconstrain

# PyStan and httpstan load inside the functions that use them: `import pymc_cv` stays cheap without them.

__all__ = ["from_pystan", "from_cmdstanpy", "PowerPosteriorTerms"]

_log = logging.getLogger("pymc_cv")
UNCONSTRAINED_NAME = "unconstrained"


def _import_stan():
    try:
        import stan
    except ImportError as err:
        raise ImportError(
            "PyStan is needed for Stan scores: pip install 'pystan>=3.10,<4' 'setuptools<81' "
            "(PyStan 3.10 imports pkg_resources, which setuptools 81 removed)."
        ) from err
    allow_nested_event_loop()
    return stan


def allow_nested_event_loop():
    """PyStan calls asyncio.run, which fails inside a running loop (Jupyter); nest_asyncio (an
    ipykernel dependency) lifts that, as PyStan's own documentation advises for notebooks.

    The converters call it themselves; call it before your own ``stan.build`` in a notebook.

    Examples
    --------
    >>> from pymc_cv.stan.convert import allow_nested_event_loop
    >>> allow_nested_event_loop()      # outside a running event loop: nothing to do
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return  # no running loop: nothing to do
    try:
        import nest_asyncio
    except ImportError as err:
        raise RuntimeError("PyStan cannot run inside a running event loop (Jupyter) without nest_asyncio: "
                           "pip install nest-asyncio") from err
    nest_asyncio.apply()


class _StanDensity:
    """transform_inits and log_prob_grad of one built PyStan model, per draw."""

    def __init__(self, posterior):
        self.posterior = posterior
        self.direct = None
        try:
            import httpstan.models
            from stan.model import DataJSONEncoder

            self.direct = httpstan.models.import_services_extension_module(posterior.model_name)
            self.data = json.loads(json.dumps(posterior.data, cls=DataJSONEncoder))
        except Exception:  # an httpstan without the module function: use PyStan's HTTP methods
            self.direct = None
        self.backend = "pystan (httpstan extension module)" if self.direct is not None else "pystan (HTTP)"

    @contextlib.contextmanager
    def batch(self):
        """While open, calls convert the data for httpstan once, not once a call.

        httpstan's extension functions take the data as a dict and split it into Stan's
        array_var_context lists (in Python, ``httpstan.utils._split_data``) on every call: on 1,192
        observations that was 94% of a draw's scores (4.6 ms of 4.9).  The split is made once here and
        handed back for this density's data, and a draw from :func:`_constrained_draws` brings its own
        split (the parameters of a draw cost as much to split as small data); anything else is split as
        before."""
        if self.direct is None:
            yield self
            return
        import httpstan.utils

        original = httpstan.utils._split_data
        names_r, values_r, dim_r, names_i, values_i, dim_i = original(self.data)
        # plain floats and ints: the extension casts every element, and numpy scalars cast slower
        split = (names_r, [float(v) for v in values_r], dim_r, names_i, [int(v) for v in values_i], dim_i)

        def split_once(data):
            if data is self.data:
                return split
            return data.split if isinstance(data, _Draw) else original(data)

        httpstan.utils._split_data = split_once
        try:
            yield self
        finally:
            httpstan.utils._split_data = original

    def unconstrain(self, constrained):
        if self.direct is not None:
            return np.asarray(self.direct.transform_inits(self.data, constrained), dtype=float)
        return np.asarray(self.posterior.unconstrain_pars(constrained), dtype=float)

    def log_prob(self, unconstrained):
        if self.direct is not None:
            return float(self.direct.log_prob(self.data, np.asarray(unconstrained, dtype=float).tolist(), True))
        return float(self.posterior.log_prob(list(unconstrained), adjust_transform=True))

    def grad(self, unconstrained):
        if self.direct is not None:
            point = np.asarray(unconstrained, dtype=float).tolist()
            return np.asarray(self.direct.log_prob_grad(self.data, point, True), dtype=float)
        return np.asarray(self.posterior.grad_log_prob(list(unconstrained)), dtype=float)

    def point_and_score(self, constrained):
        """The unconstrained draw and its score, as lists (the extension module's own output)."""
        if self.direct is not None:
            u = self.direct.transform_inits(self.data, constrained)
            return u, self.direct.log_prob_grad(self.data, u, True)
        u = self.unconstrain(constrained)
        return u, self.grad(u)


def _scores(density, post, progressbar):
    """Unconstrained draws and scores, (chain, draw, k), of every draw of the posterior group."""
    X, G = [], []
    # tens of thousands of small lists, none cyclic: with PyMC or PyStan loaded, the collector's passes
    # they set off took 0.11-0.13 s of a 0.22 s conversion (eight schools, 4,000 draws)
    with progress_bar(progressbar) as bar, density.batch(), _collector_paused():
        # the extension module reads only a draw's split form: no per-draw dict of values
        draws = _constrained_draws(post, list(density.posterior.param_names), values=density.direct is None)
        task = bar.add_task("Stan scores", completed=0, total=len(draws))
        U = _unconstrained_elementwise(density, draws)
        for i, point in enumerate(draws):
            if U is None:
                u, g = density.point_and_score(point)
            else:
                u = U[i]
                g = density.direct.log_prob_grad(density.data, u, True)
            X.append(u)
            G.append(g)
            if i % 200 == 199 or i == len(draws) - 1:
                bar.update(task, completed=i + 1)
    X, G = np.array(X, dtype=float), np.array(G, dtype=float)
    bad = int(np.sum(~np.isfinite(G).all(axis=1)))
    if bad:
        warnings.warn(f"The Stan scores are NaN or inf at {bad} draw(s); pymc_cv.summary will refuse them.",
                      stacklevel=3)
    shape = (post.sizes["chain"], post.sizes["draw"], X.shape[1])
    return X.reshape(shape), G.reshape(shape)


# draws beyond each coordinate's extremes at which Stan's transform_inits fits the transforms, and
# at which the fitted transforms are checked against it
_PROBES, _CHECKS = 8, 16


def _unconstrained_elementwise(density, draws):
    """Every draw's unconstrained values as lists, from Stan's transforms recovered at a few draws
    (``unconstrain``), checked against ``transform_inits`` at others; None where they cannot be
    (constraints that are not elementwise), or without the extension module."""
    if density.direct is None or len(draws) < 4 * (_PROBES + _CHECKS):
        return None
    direct, data = density.direct, density.data
    Xc = np.array([p.split[1] for p in draws], dtype=float)
    # the draws hold transformed parameters and generated quantities too, after the parameters: as
    # many of their first values as Stan writes back for a point without those are the parameters
    u0 = direct.transform_inits(data, draws[0])
    n_par = len(direct.write_array(data, u0, False, False))
    if n_par != len(u0) or not unconstrain.matches(np.array(direct.write_array(data, u0, False, False)),
                                                  Xc[0, :n_par]):
        return None
    Xc = Xc[:, :n_par]
    rng = np.random.default_rng(0)
    probes = unconstrain.probe_draws(Xc, _PROBES, rng)
    stan_u = np.array([direct.transform_inits(data, draws[i]) for i in probes], dtype=float)
    transforms = unconstrain.fit_transforms(Xc[probes], stan_u)
    if transforms is None:
        return None
    U = transforms(Xc)
    checks = rng.choice(np.setdiff1d(np.arange(len(draws)), probes), size=_CHECKS, replace=False)
    stan_check = np.array([direct.transform_inits(data, draws[i]) for i in checks], dtype=float)
    if not (np.all(np.isfinite(U)) and unconstrain.matches(U[checks], stan_check)):
        return None
    U[probes] = stan_u
    return U.tolist()


def _build(stan, program_code, data):
    """stan.build for our own use: PyStan writes its build progress to stdout, which is the
    user's (a notebook cell's output, a doctest's); send it to stderr with PyStan's other messages."""
    with contextlib.redirect_stdout(sys.stderr):
        return stan.build(program_code, data=data)


def _check_recorded_logp(density, idata, X, per_chain=16):
    """Stan's log density at a few draws of every chain against its ``lp__``: equal up to a constant
    per chain, or the draws and the program are not the pair that was sampled.  Returns the score group's
    ``PAIRING`` attribute: what was compared, or why nothing could be."""
    if "sample_stats" not in compat.group_names(idata) or "lp" not in compat.group(idata, "sample_stats"):
        return UNCHECKED + "the fit has no lp__ to compare the program's log density with"
    recorded = np.asarray(compat.group(idata, "sample_stats")["lp"].transpose("chain", "draw").values, dtype=float)
    n_chain, n_draw = recorded.shape
    if X.shape[:2] != (n_chain, n_draw):
        return UNCHECKED + "the fit's lp__ is not laid out as its draws"
    at = np.unique(np.linspace(0, n_draw - 1, min(per_chain, n_draw)).astype(int))
    with density.batch():
        model = np.array([[density.log_prob(X[c, j]) for j in at] for c in range(n_chain)])
    check = check_recorded_logp(model, recorded[:, at])
    if not check.ok:
        raise DrawsModelMismatchError(
            f"The fit's draws are not the points Stan visited under this program and data: {check.evidence()}. "
            "Pass the fit together with the model (stan.build) that sampled it, with the same data.")
    return CHECKED + "Stan's lp__ equals the program's log density at 16 draws of every chain"


def _finish(idata, X, G, backend, pairing):
    dims = {UNCONSTRAINED_NAME: ["unconstrained_dim"]}
    new = with_cv_groups(idata, {UNCONSTRAINED_NAME: X}, {UNCONSTRAINED_NAME: G}, dims=dims,
                         attrs={"score_backend": backend, PAIRING: pairing})
    _log.info("pymc_cv: Stan scores computed with %s", backend)
    return new


def from_pystan(fit, posterior, *, progressbar=False, **arviz_kwargs):
    """InferenceData of a PyStan 3 fit, with the unconstrained draws and the scores added.

    Parameters
    ----------
    fit : stan.fit.Fit
        The output of ``posterior.sample(...)``.
    posterior : stan.model.Model
        The model returned by ``stan.build(program_code, data=...)``.
    progressbar : bool
    **arviz_kwargs
        Passed to ``arviz.from_pystan`` on ArviZ 0.x (e.g. ``log_likelihood``, ``coords``, ``dims``);
        ArviZ 1 has no PyStan converter, and there only ``coords`` and ``dims`` apply.

    Returns
    -------
    arviz.InferenceData
        ArviZ's conversion plus ``unconstrained_posterior`` and ``score`` (one variable,
        ``unconstrained``, in Stan's order of the unconstrained parameter vector).  The group
        attribute ``score_backend`` says how the scores were computed.

    Examples
    --------
    A normal mean with known noise: its posterior mean is sum(y) / (n + 1/4) exactly, and a
    CV is exact for it (the first build of a program takes about a minute; httpstan caches it).

    >>> import numpy as np, stan, pymc_cv
    >>> program = ("data { int<lower=1> N; vector[N] y; real<lower=0, upper=1> temperature; } "
    ...            "parameters { real mu; } "
    ...            "model { mu ~ normal(0, 2); target += temperature * normal_lpdf(y | mu, 1); }")
    >>> data = {"N": 3, "y": [0.3, -0.5, 1.2], "temperature": 1.0}
    >>> posterior = stan.build(program, data=data, random_seed=1)   # doctest: +ELLIPSIS
    Building...
    >>> fit = posterior.sample(num_chains=2, num_samples=300)
    >>> idata = pymc_cv.from_pystan(fit, posterior)
    >>> table = pymc_cv.summary(idata, var_names=["mu"], progressbar=False)
    >>> bool(abs(table.loc["mu", "cv_mean"] - 1.0 / 3.25) < 1e-8)
    True
    """
    _import_stan()
    idata = compat.pystan_posterior(fit, posterior, **arviz_kwargs)
    density = _StanDensity(posterior)
    X, G = _scores(density, compat.group(idata, "posterior"), progressbar)
    pairing = _check_recorded_logp(density, idata, X)
    return _finish(idata, X, G, density.backend, pairing)


class _Draw(dict):
    """One draw's constrained parameter values (or none), carrying them also in the split form
    httpstan's extension functions build from a dict on every call (``split``), made once for all draws."""

    split = None


def _constrained_draws(post, names, values=True):
    """One dict of constrained parameter values per draw, chain after chain, from the posterior
    group (so the draws line up with every other group of the InferenceData); with ``values=False``
    each dict is empty and only its ``split`` form is made."""
    missing = [n for n in names if n not in post.data_vars]
    if missing:
        raise ValueError(f"The fit has no draws of the program's parameters {missing}: were the fit and the "
                         "model the same program?")
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    arrays = {n: np.asarray(post[n].transpose("chain", "draw", ...).values, dtype=float).reshape(
        n_chain * n_draw, *post[n].shape[2:]) for n in names}
    # Stan reads arrays in column-major order: each draw's axes reversed, then flattened
    flat = np.hstack([a.transpose(0, *range(a.ndim - 1, 0, -1)).reshape(len(a), -1) for a in arrays.values()])
    head = ([n.encode("utf-8") for n in names], [a.shape[1:] for a in arrays.values()])
    listed = {n: a.tolist() for n, a in arrays.items()} if values else {}
    draws = []
    for i, row in enumerate(flat.tolist()):
        draw = _Draw({n: v[i] for n, v in listed.items()})
        draw.split = (head[0], row, head[1], [], [], [])
        draws.append(draw)
    return draws


@contextlib.contextmanager
def _collector_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _program_and_data(model, data):
    if model is None:
        raise ValueError(
            "from_cmdstanpy needs the Stan program: pass model= a CmdStanModel, the path of the .stan "
            "file, or the program code (a CmdStanPy fit does not keep it)."
        )
    if hasattr(model, "code"):
        code = model.code()
        if code is None:
            raise ValueError("The CmdStanModel has no Stan program to read; pass the .stan file path instead.")
    elif isinstance(model, str) and model.strip().endswith(".stan") and "\n" not in model:
        with open(model) as fh:
            code = fh.read()
    elif isinstance(model, str):
        code = model
    else:
        raise ValueError(f"model={type(model).__name__}; pass a CmdStanModel, a .stan path or program code.")
    if data is None:
        data = {}
    elif isinstance(data, str):
        with open(data) as fh:
            data = json.load(fh)
    return code, dict(data)


def from_cmdstanpy(fit, model=None, data=None, *, diagnostic_files=None, progressbar=False, **arviz_kwargs):
    """InferenceData of a CmdStanPy fit, with the unconstrained draws and the scores added.

    Parameters
    ----------
    fit : cmdstanpy.CmdStanMCMC
        From ``model.sample(...)`` or ``cmdstanpy.from_csv(...)``.
    model : cmdstanpy.CmdStanModel, str
        The model (its ``.stan`` program is read), a path to the ``.stan`` file, or the program code;
        not needed with diagnostic files.
    data : dict or str
        The data the fit used (a dict or a JSON file path); not needed with diagnostic files.
    diagnostic_files : list of str, optional
        CmdStan's diagnostic files, one per chain in chain order.  Default: the fit's own, when it
        was sampled with ``save_latent_dynamics=True``.  They hold every draw's unconstrained point
        and Stan's gradient there, so nothing is built or evaluated; they must be written with at
        least 15 significant digits (``sig_figs=18``), or the scores' rounding would be larger than
        the se of the CV estimates (an error says so).
    progressbar : bool
    **arviz_kwargs
        Passed to ``arviz.from_cmdstanpy``.

    Returns
    -------
    arviz.InferenceData
        As :func:`from_pystan`.  The scores come from the diagnostic files, or else from the same
        program built with PyStan (see the module notes); ``score_backend`` in the groups'
        attributes says which.

    Examples
    --------
    Sampling needs CmdStan, which this package does not install (tests/test_stan.py runs this
    function on a fit read back with ``cmdstanpy.from_csv``), hence the skips:

    >>> import cmdstanpy, pymc_cv
    >>> model = cmdstanpy.CmdStanModel(stan_file="stan_models/lotka_volterra.stan")  # doctest: +SKIP
    >>> fit = model.sample(data="lv_data.json", chains=4)                          # doctest: +SKIP
    >>> idata = pymc_cv.from_cmdstanpy(fit, model, "lv_data.json")                 # doctest: +SKIP
    >>> idata.score.attrs["score_backend"]                                         # doctest: +SKIP
    "pystan (httpstan extension module); CmdStan's log_prob not used"
    """
    _check_cmdstan_fit(fit)
    files = _latent_dynamics_files(fit, diagnostic_files)
    if files:
        idata = compat.from_cmdstanpy(fit, **arviz_kwargs)
        if model is not None or data is not None:
            warnings.warn("model= and data= not used: the scores are read from the diagnostic files.", UserWarning,
                          stacklevel=2)
        X, G = _from_latent_dynamics(idata, files)
        return _finish(idata, X, G, "CmdStan's diagnostic file (its gradients g_ of -log p, negated)",
                       CHECKED + "the draws and gradients are the sampler's own record (CmdStan's diagnostic files)")
    stan = _import_stan()
    code, data = _program_and_data(model, data)
    idata = compat.from_cmdstanpy(fit, **arviz_kwargs)
    try:
        built = _build(stan, code, data)
    except RuntimeError as err:  # httpstan's message for data that do not fit the program's data block
        given = "no data= was given" if not data else f"data= has {sorted(data)}"
        raise ValueError(f"The Stan program does not build with the data ({given}): {err}. Pass data= the dict "
                         "or JSON file path the fit was sampled with.") from err
    density = _StanDensity(built)
    X, G = _scores(density, compat.group(idata, "posterior"), progressbar)
    pairing = _check_recorded_logp(density, idata, X)
    return _finish(idata, X, G, f"{density.backend}; CmdStan's log_prob not used", pairing)


def _check_cmdstan_fit(fit):
    try:
        from cmdstanpy import CmdStanMCMC
    except ImportError as err:
        raise ImportError("from_cmdstanpy reads CmdStanPy fits: pip install cmdstanpy (or pymc-cv[stan]).") from err
    if not isinstance(fit, CmdStanMCMC):
        raise TypeError(f"fit= is a {type(fit).__name__}, not a CmdStanPy fit: pass the CmdStanMCMC that "
                        "CmdStanModel.sample() returned, or cmdstanpy.from_csv(...) of its CSV files. For a "
                        "PyStan fit use pymc_cv.from_pystan(fit, posterior).")


# CmdStan writes 6 or 8 significant digits unless sampled with sig_figs=: scores rounded there move
# a CV estimate by about 1e-6 relative, more than many reported se, so fewer than this are refused
_MIN_SIG_FIGS = 15
_MANTISSA = re.compile(r"^[-+]?0*\.?0*|[^0-9]")  # what is not a significant digit of a mantissa


class LatentDynamics(NamedTuple):
    """One chain's diagnostic file (CmdStan's ``diagnostic_file``, CmdStanPy's latent dynamics):
    per saved iteration, Stan's lp__, the unconstrained point q and the gradient g of the potential
    -log p there (Stan negates the log density's gradient for the Hamiltonian)."""

    names: list
    lp: np.ndarray
    q: np.ndarray
    g: np.ndarray
    sig_figs: int


def read_latent_dynamics(path):
    """Read one CmdStan diagnostic file (Stan CSV: ``#`` comments, a header, one row per saved
    iteration with the sampler's ``..__`` columns, then q, ``p_`` momenta and ``g_`` gradients)."""
    header, rows, first = None, [], []
    with open(path) as fh:
        for line in fh:
            if line.startswith("#") or not line.strip():
                continue
            tokens = line.strip().split(",")
            if header is None:
                header = tokens
                continue
            if len(first) < 50:
                first.append(tokens)
            rows.append([float(v) for v in tokens])
    if header is None or "lp__" not in header:
        raise ValueError(f"{path} is not a CmdStan diagnostic file (no header with lp__).")
    sampler = [h for h in header if h.endswith("__")]
    rest = header[len(sampler):]
    k = len(rest) // 3
    names = rest[:k]
    if len(rest) != 3 * k or rest[k:2 * k] != [f"p_{n}" for n in names] or rest[2 * k:] != [f"g_{n}" for n in names]:
        raise ValueError(f"{path}: the columns after the sampler's are not q, p_q, g_q as CmdStan writes a "
                         "diagnostic file (sample with save_latent_dynamics=True in CmdStanPy).")
    table = np.array(rows, dtype=float).reshape(len(rows), len(header))
    lp = table[:, header.index("lp__")]
    start = len(sampler)
    # the precision the point and gradient were written with: their longest mantissa
    written = [t for tokens in first for t in tokens[start:start + k] + tokens[start + 2 * k:]]
    sig_figs = max((len(_MANTISSA.sub("", t.lower().split("e")[0])) for t in written), default=0)
    return LatentDynamics(names, lp, table[:, start:start + k], table[:, start + 2 * k:], sig_figs)


def _latent_dynamics_files(fit, diagnostic_files):
    if diagnostic_files is not None:
        return [str(f) for f in diagnostic_files]
    runset = getattr(fit, "runset", None)
    files = list(getattr(runset, "diagnostic_files", None) or [])
    return files if files and all(os.path.exists(f) for f in files) else []


def _from_latent_dynamics(idata, files):
    """Unconstrained draws and scores (chain, draw, k) from the chains' diagnostic files, lined up
    with the posterior by Stan's lp__ (equal in both files of a chain)."""
    chains = [read_latent_dynamics(f) for f in files]
    post = compat.group(idata, "posterior")
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    if len(chains) != n_chain:
        raise ValueError(f"{len(chains)} diagnostic files for {n_chain} chains; pass one per chain, in chain order.")
    digits = min(c.sig_figs for c in chains)
    if digits < _MIN_SIG_FIGS:
        raise ValueError(
            f"The diagnostic files hold {digits} significant digits: scores rounded there limit every CV "
            f"estimate to about 1e-{digits} relative, below which no reported se would be true. Sample with "
            "sig_figs=18 (CmdStanPy's model.sample(..., sig_figs=18, save_latent_dynamics=True)), or pass "
            "model= and data= without diagnostic files to compute the scores with PyStan.")
    recorded = None
    if "sample_stats" in compat.group_names(idata) and "lp" in compat.group(idata, "sample_stats"):
        recorded = np.asarray(compat.group(idata, "sample_stats")["lp"].transpose("chain", "draw").values, float)
    X, G = [], []
    for c, chain in enumerate(chains):
        if chain.q.shape[0] < n_draw:
            raise ValueError(f"{files[c]} has {chain.q.shape[0]} iterations for {n_draw} draws of the posterior.")
        keep = slice(chain.q.shape[0] - n_draw, None)  # the saved warm-up, if any, comes first
        if recorded is not None and not np.allclose(chain.lp[keep], recorded[c], rtol=1e-12, atol=0):
            raise DrawsModelMismatchError(
                f"{files[c]}: its lp__ is not the fit's lp__ of chain {c}; the diagnostic files are of another "
                "fit, or not in chain order.")
        X.append(chain.q[keep])
        G.append(-chain.g[keep])
    return np.array(X), np.array(G)


class PowerPosteriorTerms:
    """Per-draw terms of thermodynamic integration for PyStan fits of one tempered program.

    The program must scale its log-likelihood by the data variable ``temperature`` and keep
    its normalising constants (``target += t * normal_lpdf(...)``, as
    ``stan_models/van_der_pol.stan``).  The same program built at temperature 1 and 0 (once,
    for every rung) gives log p(y|x) = lp_1 - lp_0, grad log p(y|x) = g_1 - g_0 and
    grad log p(x) = g_0 (Jacobian terms cancel in the differences and stay in g_0).
    """

    def __init__(self, program_code, data, temperature="temperature"):
        stan = _import_stan()
        if temperature not in data:
            raise ValueError(f"data has no '{temperature}': pass the name of the program's temperature variable "
                             "as temperature=.")
        self.hot = _StanDensity(_build(stan, program_code, {**data, temperature: 1.0}))
        self.cold = _StanDensity(_build(stan, program_code, {**data, temperature: 0.0}))

    def __call__(self, fit):
        """The :class:`~pymc_cv.evidence.rung_moments.RungArrays` of one fit, draws chain after chain, on
        Stan's unconstrained space."""
        post = compat.group(compat.pystan_posterior(fit), "posterior")
        X, g1 = (a.reshape(-1, a.shape[-1]) for a in _scores(self.hot, post, False))
        with self.hot.batch(), self.cold.batch():
            g0 = np.array([self.cold.grad(x) for x in X])
            ll = np.array([self.hot.log_prob(x) - self.cold.log_prob(x) for x in X])
        return RungArrays(ll, X, g1 - g0, g0, np.repeat(np.arange(post.sizes["chain"]), post.sizes["draw"]))
