"""Few SMC stages, refined by reweighting: the van der Pol evidence from PyMC's SMC.

PyMC's SMC picks its tempering stages adaptively, and on the van der Pol model (vv-CV paper,
section 5.2; examples/van_der_pol_evidence.py) they are few, so the quadrature over t is coarse.
``refine=True`` reweights each stage's particles onto temperatures in between (ZVCV's
Expand_Temperatures; no new sampling).  For each seed: one SMC run, then controlled TI (``cti``)
on the stages alone and on the refined ladder; the reference is the quadrature over log x.

Prints per seed the rungs, the error, the se and the estimated quadrature error of both, then
their medians and the ratio refined / stages alone.

    python bench/smc_refine.py              # 5 seeds, 1,000 particles
    python bench/smc_refine.py --seeds 10 --particles 2000
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import pymc_cv
from pymc_cv.evidence import ti_from_arrays

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
from van_der_pol_evidence import build_model, log_evidence_quadrature, simulate  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--particles", type=int, default=1000)
    args = parser.parse_args()
    y = simulate(0)
    truth, _ = log_evidence_quadrature(y)
    model = build_model(y)
    rows = []
    print("| seed | SMC stages | error (stages) | se | quadrature error | rungs refined | error (refined) | se | "
          "quadrature error | seconds SMC / refine |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for seed in range(1, args.seeds + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            plain = pymc_cv.thermodynamic_integration(model, sampler="smc", draws=args.particles, method="cti",
                                                      random_seed=seed, progressbar=False,
                                                      compile_kwargs={"mode": "NUMBA"})
            smc_s = time.perf_counter() - start
            start = time.perf_counter()
            fine = ti_from_arrays(**plain.draws, method="cti", refine=True, random_seed=seed)
            refine_s = time.perf_counter() - start
        row = (plain.log_evidence - truth, plain.se, plain.quadrature_error, fine.log_evidence - truth, fine.se,
               fine.quadrature_error)
        rows.append(row)
        print(f"| {seed} | {plain.temperatures.size} | {row[0]:+.4f} | {row[1]:.4f} | {row[2]:.4f} | "
              f"{fine.temperatures.size} | {row[3]:+.4f} | {row[4]:.4f} | {row[5]:.4f} | {smc_s:.0f} / {refine_s:.1f} |",
              flush=True)
    r = np.array(rows)
    med = np.median(np.abs(r), axis=0)
    print(f"\nreference log p(y) = {truth:.6f}; medians over {len(rows)} seeds:")
    print("| | abs error | se | quadrature error |")
    print("|---|---|---|---|")
    print(f"| SMC stages | {med[0]:.4f} | {med[1]:.4f} | {med[2]:.4f} |")
    print(f"| refined | {med[3]:.4f} | {med[4]:.4f} | {med[5]:.4f} |")
    print(f"| refined / stages | {med[3] / med[0]:.2g} | {med[4] / med[1]:.2g} | {med[5] / med[2]:.2g} |")
    within = np.mean(np.abs(r[:, 3]) <= 3 * r[:, 4])
    print(f"refined runs within 3 se: {within:.0%}; stages alone: {np.mean(np.abs(r[:, 0]) <= 3 * r[:, 1]):.0%}")


if __name__ == "__main__":
    main()
