"""Adapters that turn a PyMC model or a Stan fit into draws and scores on the unconstrained space."""
