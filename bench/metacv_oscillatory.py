"""Meta-CVs on the thesis's oscillatory family (section 5.4.1; notes-metacv 6.1).

f_a(x) = cos(2 pi a_1 + a_2 x_1 + a_3 x_2), x ~ Unif[0, 1]^2, a_1 ~ U(0.4, 0.6), a_2, a_3 ~ U(4, 6);
the integral is closed form.  The draws are taken to the unconstrained space z = logit(x), where
the density is prod sigmoid(z)(1 - sigmoid(z)) with score 1 - 2 sigmoid(z), so no boundary factor
is needed.  Meta-training on fresh tasks with N draws each (N/2 support, N/2 query), 1,000 unseen
test tasks; MAE of MC on all N draws, of the thesis's estimator (adapt on the first half, average
over the second) and of the cross-fitted one (both ways, all draws averaged).

Usage: python bench/metacv_oscillatory.py [N ...]   (env METACV_ITERS, default 4000)
"""

import os
import sys

import numpy as np
from metacv_protocol import meta_train_and_test

PUBLISHED = {10: (0.178, 0.124), 20: (0.125, 0.084), 40: (0.092, 0.061), 100: (0.059, 0.035)}


def truth(a):
    phase = np.exp(2j * np.pi * a[0])
    factors = [(np.exp(1j * b) - 1) / (1j * b) for b in a[1:]]
    return float(np.real(phase * np.prod(factors)))


def task(rng, n, d=2):
    a = np.concatenate([rng.uniform(0.4, 0.6, 1), rng.uniform(4, 6, d)])
    x = rng.uniform(size=(n, d))
    f = np.cos(2 * np.pi * a[0] + x @ a[1:])
    z = np.log(x) - np.log1p(-x)
    return (f, z, 1 - 2 * x), truth(a)


def main():
    Ns = [int(v) for v in sys.argv[1:]] or [10, 20, 40, 100]
    iters = int(os.environ.get("METACV_ITERS", 4000))
    n_test = 1000
    rows = []
    for N in Ns:
        true, res, res_q, secs = meta_train_and_test(task, N, iters, n_test)
        mc = np.mean(np.abs(res.mc_estimate - true))
        rows.append((N, mc, np.mean(np.abs(res_q.estimate - true)), np.mean(np.abs(res.estimate - true)),
                     np.mean(res.method == "mc"), np.mean(np.abs(res.estimate - true) <= 2 * res.se),
                     secs["compile"], secs["meta_training"], secs["adapt"]))
        print(f"N={N} done", flush=True)
    print(f"\nOscillatory family, d = 2, {n_test} test tasks, {iters} meta-iterations (batch 5, 2 x 64 tanh, L = 1)")
    print(f"{'N':>4} {'MC':>7} {'MetaCV(Q)':>9} {'ratio':>6} {'MetaCV(xfit)':>12} {'ratio':>6} {'fallback':>8} "
          f"{'cover2se':>8} {'compile s':>9} {'train s':>8} {'adapt s':>8}  thesis MC / MetaCV (ratio)")
    for N, mc, q, x, fb, cov, cs, ts, ad in rows:
        pub = PUBLISHED.get(N)
        pub_s = f"{pub[0]:.3f} / {pub[1]:.3f} ({pub[1] / pub[0]:.2f})" if pub else ""
        print(f"{N:>4} {mc:>7.4f} {q:>9.4f} {q / mc:>6.2f} {x:>12.4f} {x / mc:>6.2f} {fb:>8.2f} {cov:>8.2f} "
              f"{cs:>9.1f} {ts:>8.1f} {ad:>8.2f}  {pub_s}")


if __name__ == "__main__":
    main()
