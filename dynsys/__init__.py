"""dynsys: declarative, differentiable simulation of dynamical systems on JAX."""

import importlib.metadata

from ._adjoint import AbstractAdjoint as AbstractAdjoint, Autodiff as Autodiff
from ._controller import (
    AbstractController as AbstractController,
    LinearFeedback as LinearFeedback,
)
from ._method import AbstractMethod as AbstractMethod, Sequential as Sequential
from ._rollout import rollout as rollout, Trajectory as Trajectory
from ._system import AbstractSystem as AbstractSystem, LinearSystem as LinearSystem
from ._train import train as train, TrainResult as TrainResult


__version__ = importlib.metadata.version("dynsys")
