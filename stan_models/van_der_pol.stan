// Van der Pol oscillator with a power-posterior temperature (vv-CV paper, section 5.2).
// u1' = u2, u2' = x (1 - u1^2) u2 - u1, u(0) = (0, 2); log x ~ N(0, 0.25^2);
// y(s) ~ N(u1(s; x), 0.1^2) at s = 0, 1, ..., 10.  The likelihood is scaled by `temperature`
// (0 = prior, 1 = posterior) and keeps its normalising constants (target += ..._lpdf), so that
// log p(y | x) = log density at temperature 1 minus that at temperature 0.
functions {
  vector vdp(real s, vector u, real x) {
    vector[2] du;
    du[1] = u[2];
    du[2] = x * (1 - u[1]^2) * u[2] - u[1];
    return du;
  }
}
data {
  int<lower=1> S;                     // observation times after s = 0
  array[S] real s_obs;                // strictly increasing, > 0
  vector[S + 1] y;                    // y at s = 0 and at s_obs
  real<lower=0, upper=1> temperature;
}
transformed data {
  vector[2] u0 = [0.0, 2.0]';
}
parameters {
  real<lower=0> x;
}
model {
  array[S] vector[2] u = ode_rk45_tol(vdp, u0, 0.0, s_obs, 1e-8, 1e-8, 100000, x);
  vector[S + 1] u1;
  u1[1] = u0[1];
  for (i in 1:S) u1[i + 1] = u[i][1];
  target += lognormal_lpdf(x | 0, 0.25);
  target += temperature * normal_lpdf(y | u1, 0.1);
}
