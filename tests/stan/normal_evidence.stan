// Two independent parts with a log evidence in closed form (mu) and by 1-d quadrature (sigma);
// every density in full (target += ..._lpdf), as the evidence needs.
data {
  int<lower=1> N;
  vector[N] y;
  int<lower=1> M;
  vector[M] z;
}
parameters {
  real mu;
  real<lower=0> sigma;
}
model {
  target += normal_lpdf(mu | 0, 2);
  target += normal_lpdf(y | mu, 1);
  target += normal_lpdf(sigma | 0, 1) + log(2);  // half-normal
  target += normal_lpdf(z | 0, sigma);
}
