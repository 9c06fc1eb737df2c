"""Data: the `Dataset` (measured states, inputs, outputs of many experiments), the
file formats it is read from and written to, and `simulate`, which makes one from a
system. Imports `_systems` and `_rollout`."""
