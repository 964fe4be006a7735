// Lotka-Volterra on the hare-lynx data, the same model as examples/lotka_volterra.py (vv-CV paper,
// section 5.3): eight parameters on the log scale (so the sampler's space is R^8), the paper's
// priors, log-normal observations, and the ODE solved by fixed-step RK4 (h = 0.5 years) exactly as
// the PyMC version does, so both programs define the same posterior.
// du1/ds = alpha u1 - beta u1 u2 (prey), du2/ds = delta u1 u2 - gamma u2 (predators).
functions {
  vector lv(vector u, real alpha, real beta, real gamma, real delta) {
    return [alpha * u[1] - beta * u[1] * u[2], delta * u[1] * u[2] - gamma * u[2]]';
  }
  vector rk4_step(vector u, real h, real alpha, real beta, real gamma, real delta) {
    vector[2] k1 = lv(u, alpha, beta, gamma, delta);
    vector[2] k2 = lv(u + 0.5 * h * k1, alpha, beta, gamma, delta);
    vector[2] k3 = lv(u + 0.5 * h * k2, alpha, beta, gamma, delta);
    vector[2] k4 = lv(u + h * k3, alpha, beta, gamma, delta);
    return u + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4);
  }
}
data {
  int<lower=1> n_steps;                         // RK4 steps of size h from the first observation
  real<lower=0> h;
  int<lower=1> N;                               // observations
  array[N] int<lower=0, upper=n_steps> obs;     // step index of each observation
  vector<lower=0>[N] hare;
  vector<lower=0>[N] lynx;
}
parameters {
  real log_alpha;
  real log_beta;
  real log_gamma;
  real log_delta;
  vector[2] log_v0;
  vector[2] log_sigma;
}
model {
  array[n_steps + 1] vector[2] traj;
  real alpha = exp(log_alpha);
  real beta = exp(log_beta);
  real gamma = exp(log_gamma);
  real delta = exp(log_delta);
  traj[1] = exp(log_v0);
  for (k in 1:n_steps) traj[k + 1] = rk4_step(traj[k], h, alpha, beta, gamma, delta);
  log_alpha ~ normal(0, 0.5);
  log_beta ~ normal(-3, 0.5);
  log_gamma ~ normal(0, 0.5);
  log_delta ~ normal(-3, 0.5);
  log_v0 ~ normal(log(10), 1);
  log_sigma ~ normal(-1, 1);
  for (i in 1:N) {
    hare[i] ~ lognormal(log(traj[obs[i] + 1][1]), exp(log_sigma[1]));
    lynx[i] ~ lognormal(log(traj[obs[i] + 1][2]), exp(log_sigma[2]));
  }
}
