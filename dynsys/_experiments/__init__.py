"""Experiments: configs and their schema, run folders, sweeps, and one module or
folder per kind of experiment (`fit/`, `train_controller.py`) registered in
`kinds.py`; the process plumbing they run on (helper processes, signals, the stage
clock) in `runtime/`. The top layer below the command line; nothing below imports
it."""
