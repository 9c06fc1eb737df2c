"""The `fit` kind of experiment: `pipeline.py` is the recipe (data, checks,
structure scan, fit, validation, uncertainty, figures), one module per stage
beside it."""
