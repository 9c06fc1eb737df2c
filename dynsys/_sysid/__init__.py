"""System identification from input–output data: the signals it reads from a
`Dataset`, subspace estimates, initial states, validation (`compare`, residuals),
frequency and step responses, and the python-control bridge. Imports the layers
below it (`_systems` to `_fitting`)."""
