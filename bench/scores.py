"""`compute_scores` after `pm.sample` in a user's first session with a model: compilation included.

Each model runs twice in its own process, with its own empty PyTensor compile directory: first
cold (PyTensor compiles everything, as on a first run of a new model), then warm (the same
directory again, as on a rerun).  Per run: seconds of pm.sample (its compilation included), of
compute_scores, and their ratio.  The other benches run with a warm cache, which hides the
compilation a new model costs.

Usage: python bench/scores.py [draws] [model ...]     (draws per chain, default 1000; 4 chains)
       models: those of bench/workload_models.py (default: all but stochastic volatility)
Run it alone on the machine: timings next to other heavy jobs are not comparable.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

MODELS = ["eight_schools", "logistic_regression", "varying_intercepts", "gp_regression"]


def run_one(name, draws):
    """Seconds of pm.sample and compute_scores on one model (runs in the subprocess)."""
    warnings.simplefilter("ignore")
    import numpy as np
    import pymc as pm

    import pymc_cv
    import workload_models as wm

    model = getattr(wm, name)()[0]
    with model:
        t0 = time.perf_counter()
        idata = pm.sample(draws, tune=1000, chains=4, random_seed=1, progressbar=False)
        t_sample = time.perf_counter() - t0
    t0 = time.perf_counter()
    idata = pymc_cv.compute_scores(idata, model, progressbar=False)
    t_scores = time.perf_counter() - t0
    d = sum(int(np.prod(v.shape[2:])) for v in idata["score"].data_vars.values())
    return {"d": d, "sample": t_sample, "scores": t_scores}


def _in_subprocess(name, draws, compiledir):
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={compiledir}"}
    out = subprocess.run([sys.executable, __file__, "--one", name, str(draws)], capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no message)"])[-1]
        return {"error": f"exit {out.returncode}: {last[:200]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    args = sys.argv[1:]
    draws = int(args.pop(0)) if args and args[0].isdigit() else 1000
    names = args or MODELS
    print(f"4 chains x {draws} draws; each model in a fresh process, first with an empty PyTensor compile "
          "directory (cold), then with the one it left (warm)\n")
    print("| model | d | cache | pm.sample s | compute_scores s | compute_scores / pm.sample |")
    print("|---|---|---|---|---|---|")
    for name in names:
        with tempfile.TemporaryDirectory() as compiledir:
            for cache in ("cold", "warm"):
                r = _in_subprocess(name, draws, compiledir)
                if "error" in r:
                    print(f"| {name} | | {cache} | {r['error']} | | |", flush=True)
                    continue
                print(f"| {name} | {r['d']} | {cache} | {r['sample']:.1f} | {r['scores']:.2f} "
                      f"| {r['scores'] / r['sample']:.3f} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        print(json.dumps(run_one(sys.argv[2], int(sys.argv[3]))))
    else:
        main()
