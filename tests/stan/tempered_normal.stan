// x ~ N(0, 2^2), y_i ~ N(x, 1) with the likelihood scaled by `temperature` (constants kept):
// the power posteriors are normal and log p(y) is closed form.
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0, upper=1> temperature;
}
parameters {
  real x;
}
model {
  target += normal_lpdf(x | 0, 2);
  target += temperature * normal_lpdf(y | x, 1);
}
