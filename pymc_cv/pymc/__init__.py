"""The PyMC edge: scores of a model's draws, tempered models, population MCMC, Bambi models, and
thermodynamic integration that samples.

PyMC itself loads on first use (it takes seconds to import), so importing these modules is cheap.
"""
