"""Experiments: configs and their schema, run folders, interruption, sweeps, and one
module per kind of experiment (`fit.py`, `train_controller.py`) registered in
`kinds.py`. The top layer below the command line; nothing below imports it."""
