// A conjugate test model with an interval (logit) and a lower-bounded (log) parameter:
// p ~ Beta(a, b), k ~ Binomial(n, p); lambda ~ Gamma(alpha, beta), counts ~ Poisson(lambda);
// mu ~ Normal(m0, s0), y ~ Normal(mu, 1).
data {
  int<lower=0> n;
  int<lower=0, upper=n> k;
  real<lower=0> a;
  real<lower=0> b;
  int<lower=0> J;
  array[J] int<lower=0> counts;
  real<lower=0> alpha;
  real<lower=0> beta;
  int<lower=0> M;
  vector[M] y;
  real m0;
  real<lower=0> s0;
}
parameters {
  real<lower=0, upper=1> p;
  real<lower=0> lambda;
  real mu;
}
model {
  p ~ beta(a, b);
  k ~ binomial(n, p);
  lambda ~ gamma(alpha, beta);
  counts ~ poisson(lambda);
  mu ~ normal(m0, s0);
  y ~ normal(mu, 1);
}
