"""The posteriordb posteriors the benches run on, read from a posteriordb checkout.

``PDB`` is the root of a checkout of the Stan posterior database (or the copy in
``../shared/data/posteriordb/``): the folder that holds ``posterior_database/``.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass

import numpy as np

# issue 27's set; diamonds last, since Stan takes minutes to sample it
NAMES = [
    "arK-arK", "garch-garch11", "hmm_example-hmm_example", "bball_drive_event_0-hmm_drive_0",
    "eight_schools-eight_schools_noncentered", "gp_pois_regr-gp_regr", "gp_pois_regr-gp_pois_regr",
    "hudson_lynx_hare-lotka_volterra", "low_dim_gauss_mix-low_dim_gauss_mix", "kidiq-kidscore_momiq",
    "kidiq-kidscore_interaction", "earnings-earn_height", "earnings-logearn_interaction", "mesquite-logmesquite",
    "nes2000-nes", "sblrc-blr", "kilpisjarvi_mod-kilpisjarvi", "diamonds-diamonds",
]

DEFAULT_PDB = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "posteriordb")


@dataclass(frozen=True)
class Posterior:
    """One posterior: its name, Stan program, data, and posteriordb's reference draws (or None)."""

    name: str
    code: str
    data: dict
    reference_draws: list | None


def _root(pdb):
    root = os.path.join(pdb, "posterior_database")
    if not os.path.isdir(root):
        raise SystemExit(f"{pdb} has no posterior_database/ folder: pass the root of a posteriordb checkout "
                         f"(e.g. {os.path.normpath(DEFAULT_PDB)}).")
    return root


def _read_zipped_json(path):
    with zipfile.ZipFile(path) as zf:
        (inner,) = [n for n in zf.namelist() if n.endswith(".json")]
        return json.loads(zf.read(inner))


def load(pdb, name):
    """The :class:`Posterior` ``name`` of the posteriordb at ``pdb``."""
    root = _root(pdb)
    with open(os.path.join(root, "posteriors", f"{name}.json")) as fh:
        info = json.load(fh)
    with open(os.path.join(root, "models", "stan", f"{info['model_name']}.stan")) as fh:
        code = fh.read()
    data = _read_zipped_json(os.path.join(root, "data", "data", f"{info['data_name']}.json.zip"))
    ref = info.get("reference_posterior_name")
    draws = None
    if ref:
        path = os.path.join(root, "reference_posteriors", "draws", "draws", f"{ref}.json.zip")
        if os.path.exists(path):
            draws = _read_zipped_json(path)
    return Posterior(name, code, data, draws)


def reference_draw_moments(draws):
    """{Stan name: (mean, mcse, sd, mcse of the sd)} of posteriordb's reference draws (a list of
    chains, each a dict of 1-based names to thinned draws), the mcses by ArviZ over those chains."""
    from pymc_cv import compat

    out = {}
    for key in draws[0]:
        arr = np.array([chain[key] for chain in draws], dtype=float)
        varying = np.ptp(arr) > 0
        out[key] = (float(arr.mean()), compat.mcse_mean(arr) if varying else 0.0, float(arr.std(ddof=1)),
                    compat.mcse_sd(arr) if varying else 0.0)
    return out


def _draw_quantile(draws, key, prob):
    """posteriordb's reference draws' ``prob`` quantile of ``key`` and its mcse (ArviZ, over their chains)."""
    from pymc_cv import compat

    arr = np.array([chain[key] for chain in draws], dtype=float)
    return float(np.quantile(arr, prob)), compat.mcse_quantile(arr, prob) if np.ptp(arr) > 0 else 0.0


def reference_sd_se(row):
    """A reference row's sd's own se: 0 for the exact references, sd / sqrt(2 ESS) for the long runs
    (the Gaussian value)."""
    ess = row.get("ess_mean")
    return 0.0 if ess is None else row["sd"] / np.sqrt(2.0 * ess) if np.isfinite(ess) and ess > 0 else 0.0


def quantile_entry(probs, values, ses):
    """A reference row's quantiles as stored: {"quantiles": {"0.03": value, ...}, "quantile_mcse": {...}}."""
    return {"quantiles": {f"{p:g}": float(v) for p, v in zip(probs, values)},
            "quantile_mcse": {f"{p:g}": float(s) for p, s in zip(probs, ses)}}


def reference_quantile(row, prob):
    """(value, se) of a reference row's ``prob`` quantile, or None where the reference has none."""
    key = f"{prob:g}"
    if key not in row.get("quantiles", {}):
        return None
    return row["quantiles"][key], row["quantile_mcse"][key]


def stan_name(label):
    """Stan's 1-based name of an ArviZ row label: ``theta[0]`` -> ``theta[1]``, ``L[0, 1]`` -> ``L[1,2]``."""
    if "[" not in label:
        return label
    base, idx = label[:-1].split("[", 1)
    return f"{base}[{','.join(str(int(i) + 1) for i in idx.split(','))}]"


def posteriordb_check(rows, draws):
    """{label: posteriordb's mean and mcse of that row, and z = (ours - theirs) / combined mcse; the same
    for the sd (z_sd) and each stored quantile (z_q0.03, ...)} for the rows {label: {"mean", "mcse", "sd"}}
    that posteriordb's reference ``draws`` (or None) hold."""
    if draws is None:
        return {}
    theirs = reference_draw_moments(draws)
    check = {}
    for label, row in rows.items():
        key = stan_name(label)
        if key in theirs:
            m, se, sd, se_sd = theirs[key]
            combined = np.hypot(se, row["mcse"])
            combined_sd = np.hypot(se_sd, reference_sd_se(row))
            check[label] = {"posteriordb_mean": m, "posteriordb_mcse": se,
                            "z": float((row["mean"] - m) / combined) if combined > 0 else 0.0,
                            "posteriordb_sd": sd, "posteriordb_mcse_sd": se_sd,
                            "z_sd": float((row["sd"] - sd) / combined_sd) if combined_sd > 0 else 0.0}
            for prob in map(float, row.get("quantiles", {})):
                q, q_se = reference_quantile(row, prob)
                theirs_q, theirs_se = _draw_quantile(draws, key, prob)
                combined_q = np.hypot(q_se, theirs_se)
                check[label][f"z_q{prob:g}"] = float((q - theirs_q) / combined_q) if combined_q > 0 else 0.0
    return check


def _lotka_volterra_conditional(rows):
    """lotka_volterra's replicated data are ``lognormal_rng(log(z), sigma)``: their mean given the
    parameters is ``z exp(sigma^2 / 2)``, which has the same expectation without the rng's noise."""
    out = {}
    for label in rows:
        base = label.split("[", 1)[0]
        if base not in ("y_rep", "y_init_rep"):
            continue
        idx = label[len(base) + 1:-1].split(", ")
        k = idx[-1]
        z = rows[f"z[{idx[0]}, {k}]"] if base == "y_rep" else rows[f"z_init[{k}]"]
        out[label] = z * np.exp(rows[f"sigma[{k}]"] ** 2 / 2)
    return out


# Rao-Blackwellised rows: {posterior: (function of the row arrays -> {label: conditional mean per draw},
# how it is made)}; the reference's mean and mcse of those rows come from the conditional means
CONDITIONAL = {
    "hudson_lynx_hare-lotka_volterra": (
        _lotka_volterra_conditional,
        "y_rep[n, k] and y_init_rep[k]: mean of z[n, k] exp(sigma[k]^2 / 2) and z_init[k] exp(sigma[k]^2 / 2), "
        "their expectation given the parameters"),
}
