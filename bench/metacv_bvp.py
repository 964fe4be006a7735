"""Meta-CVs on the thesis's boundary-value ODE problem (section 5.4.2; notes-metacv 6.2).

-(c(s) u'(s))' = 50 x^2 on (0, 1), u(0) = u(1) = 0, c(s) = 1 + a s, a ~ U(0, 1) per task,
x ~ N(0, 1) (d = 1, score -x); f_a(x) = int_0^1 u(s) ds by the finite differences of Giles (2015)
on 32 cells (c at the cell midpoints).  f is 50 x^2 times the integral for a unit load, so the
truth E[f] is that integral times 50: exact, no reference run needed.  100 unseen test tasks.

Usage: python bench/metacv_bvp.py [N ...]   (env METACV_ITERS, default 2000)
"""

import os
import sys

import numpy as np
from metacv_protocol import meta_train_and_test

PUBLISHED = {4: (1.904, 0.628), 10: (1.241, 0.327), 20: (0.682, 0.131), 40: (0.604, 0.101)}


def unit_load_integral(a, cells=32):
    """h 1' A^-1 1 for the FD matrix of -(c u')' with c(s) = 1 + a s."""
    h = 1.0 / cells
    c = 1 + a * (np.arange(cells) + 0.5) * h  # c at the cell midpoints s_{i+1/2}
    main = (c[:-1] + c[1:]) / h**2
    off = -c[1:-1] / h**2
    A = np.diag(main) + np.diag(off, 1) + np.diag(off, -1)
    return h * np.sum(np.linalg.solve(A, np.ones(cells - 1)))


def task(rng, n):
    a = rng.uniform()
    k = 50 * unit_load_integral(a)
    x = rng.normal(size=(n, 1))
    return (k * x[:, 0] ** 2, x, -x), k


def main():
    Ns = [int(v) for v in sys.argv[1:]] or [4, 10, 20, 40]
    iters = int(os.environ.get("METACV_ITERS", 2000))
    n_test = 100
    rows = []
    for N in Ns:
        true, res, res_q, secs = meta_train_and_test(task, N, iters, n_test)
        err_mc, err_q, err_x = (np.abs(v - true) for v in (res.mc_estimate, res_q.estimate, res.estimate))
        rows.append((N, err_mc, err_q, err_x, np.mean(res.method == "mc"), secs, secs["adapt"]))
        print(f"N={N} done", flush=True)
    print(f"\nBoundary-value ODE, d = 1, {n_test} test tasks, {iters} meta-iterations (batch 5, 2 x 64 tanh, L = 1)")
    print(f"{'N':>4} {'MC mean/med':>13} {'MetaCV(Q)':>13} {'ratio':>6} {'MetaCV(xfit)':>13} {'ratio':>6} "
          f"{'fallback':>8} {'compile s':>9} {'train s':>8} {'adapt s':>8}  thesis MC / MetaCV mean (ratio)")
    for N, mc, q, x, fb, secs, ad in rows:
        pub = PUBLISHED.get(N)
        pub_s = f"{pub[0]:.3f} / {pub[1]:.3f} ({pub[1] / pub[0]:.2f})" if pub else ""
        print(f"{N:>4} {mc.mean():>6.3f}/{np.median(mc):<6.3f} {q.mean():>6.3f}/{np.median(q):<6.3f} "
              f"{q.mean() / mc.mean():>6.2f} {x.mean():>6.3f}/{np.median(x):<6.3f} {x.mean() / mc.mean():>6.2f} "
              f"{fb:>8.2f} {secs['compile']:>9.1f} {secs['meta_training']:>8.1f} {ad:>8.2f}  {pub_s}")


if __name__ == "__main__":
    main()
