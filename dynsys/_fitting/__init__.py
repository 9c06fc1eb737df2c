"""Fitting: `fit` and its losses, the solvers behind it (Levenberg–Marquardt,
L-BFGS, optax), closed-form least squares, the generic `train` loop, metrics and
costs. Imports `_systems`, `_rollout`, `_data`."""
