// Hierarchical Gaussian-process regression, the model of examples/hierarchical_gp_metacv.py:
// k(z, z') = amp^2 exp(-(z - z')^2 / (2 ls^2)), amp, ls ~ Gamma(25, 25), known noise sd.
// The predictive means at the test inputs are generated quantities: each is one integration task
// E[f_j(amp, ls)] over the hyperparameter posterior (Meta-CVs, vv-CVs or CFs per task).
data {
  int<lower=1> Q;
  vector[Q] z;
  vector[Q] y;
  real<lower=0> noise;
  int<lower=0> M;
  vector[M] z_test;
}
parameters {
  real<lower=0> amp;
  real<lower=0> ls;
}
model {
  matrix[Q, Q] K = add_diag(gp_exp_quad_cov(to_array_1d(z), amp, ls), square(noise));
  amp ~ gamma(25, 25);
  ls ~ gamma(25, 25);
  y ~ multi_normal_cholesky(rep_vector(0, Q), cholesky_decompose(K));
}
generated quantities {
  vector[M] predictive_mean;
  {
    matrix[Q, Q] K = add_diag(gp_exp_quad_cov(to_array_1d(z), amp, ls), square(noise));
    matrix[M, Q] Ks = gp_exp_quad_cov(to_array_1d(z_test), to_array_1d(z), amp, ls);
    predictive_mean = Ks * mdivide_left_spd(K, y);
  }
}
