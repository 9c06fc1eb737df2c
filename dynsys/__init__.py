"""dynsys: declarative, differentiable simulation of dynamical systems on JAX.

This file only re-exports: what the `TYPE_CHECKING` block below lists is the public
API. The implementation lives in folders by layer, each importing only from the
layers listed before it here (checked by the import contract in `pyproject.toml`);
see `docs/architecture.md`.

The names are loaded on first use (PEP 562), so that `import dynsys` and the
`dynsys` command start without importing JAX: `dynsys.fit` imports
`dynsys._fitting.fit` the first time it is read. The block below is both what type
checkers and readers see and the table `__getattr__` loads from (it reads this
file's own import lines once, so a name is added in one place).
"""

# `typing.TYPE_CHECKING` without importing `typing` (a tenth of the command's
# start-up); type checkers treat this name as true.
TYPE_CHECKING = False

if TYPE_CHECKING:
    # Compiling once across runs (opt-in: a plain call changes no JAX setting).
    from ._compile.cache import use_compile_cache as use_compile_cache

    # Control on models: observers, output feedback, LQR / LQG baselines.
    from ._control.lqg import kalman_gain as kalman_gain, lqr_gain as lqr_gain
    from ._control.observer import (
        ObservedPlant as ObservedPlant,
        OutputFeedback as OutputFeedback,
    )

    # Data: datasets, files, simulation.
    from ._data.checks import check_data as check_data
    from ._data.dataset import Dataset as Dataset
    from ._data.detrend import detrend as detrend
    from ._data.load import load_dataset as load_dataset
    from ._data.simulate import simulate as simulate
    from ._distributed import (
        DistributedError as DistributedError,
        global_dataset as global_dataset,
        initialize_distributed as initialize_distributed,
        is_main_process as is_main_process,
    )

    # Experiments from configs.
    from ._experiments.config import ConfigError as ConfigError
    from ._experiments.fit.identify import (
        identify as identify,
        Identified as Identified,
    )
    from ._experiments.results import ExperimentResult as ExperimentResult
    from ._experiments.run import run_experiment as run_experiment
    from ._experiments.schema import resolve_config as resolve_config

    # Fitting: fit, train, solvers, least squares, metrics, costs.
    from ._fitting.cost import (
        quadratic_cost as quadratic_cost,
        tracking_cost as tracking_cost,
    )
    from ._fitting.covariance import ParameterCovariance as ParameterCovariance
    from ._fitting.encoder import StateEncoder as StateEncoder
    from ._fitting.fit import fit as fit, FitResult as FitResult
    from ._fitting.least_squares import fit_least_squares as fit_least_squares
    from ._fitting.levenberg_marquardt import LevenbergMarquardt as LevenbergMarquardt
    from ._fitting.losses import (
        AbstractLoss as AbstractLoss,
        MultipleShooting as MultipleShooting,
        OneStep as OneStep,
        Prediction as Prediction,
        Simulation as Simulation,
    )
    from ._fitting.metrics import (
        fit_percent as fit_percent,
        nrmse as nrmse,
        spectral_radius as spectral_radius,
    )
    from ._fitting.optax_solver import LBFGS as LBFGS, OptaxSolver as OptaxSolver
    from ._fitting.solver_base import AbstractSolver as AbstractSolver
    from ._fitting.train import train as train, TrainResult as TrainResult

    # Model files and many hosts.
    from ._io import load as load, load_names as load_names, save as save

    # Rollout: the engine that records trajectories.
    from ._rollout.adjoint import (
        AbstractAdjoint as AbstractAdjoint,
        Autodiff as Autodiff,
        Checkpointed as Checkpointed,
        LinearAdjoint as LinearAdjoint,
    )
    from ._rollout.method import (
        AbstractMethod as AbstractMethod,
        Chunked as Chunked,
        Parallel as Parallel,
        Sequential as Sequential,
    )
    from ._rollout.rollout import rollout as rollout, Trajectory as Trajectory
    from ._rollout.sharding import (
        batch_sharding as batch_sharding,
        shard_batch as shard_batch,
    )

    # System identification from input-output data.
    from ._sysid.armax import fit_armax as fit_armax
    from ._sysid.arx import fit_arx as fit_arx
    from ._sysid.bands import (
        pole_uncertainty as pole_uncertainty,
        PoleUncertainty as PoleUncertainty,
        simulation_band as simulation_band,
        static_gain_uncertainty as static_gain_uncertainty,
        step_response_band as step_response_band,
    )
    from ._sysid.box_jenkins import fit_box_jenkins as fit_box_jenkins
    from ._sysid.delay import (
        delay_inputs as delay_inputs,
        estimate_delay as estimate_delay,
        with_input_delay as with_input_delay,
    )
    from ._sysid.held_probe import held_input_excursion as held_input_excursion
    from ._sysid.impulse import (
        impulse_estimate as impulse_estimate,
        ImpulseEstimate as ImpulseEstimate,
    )
    from ._sysid.initial_state import estimate_x0 as estimate_x0
    from ._sysid.neural import (
        fit_neural as fit_neural,
        neural_initial_state as neural_initial_state,
        NeuralFit as NeuralFit,
    )
    from ._sysid.order import (
        information_criteria as information_criteria,
        OrderCandidate as OrderCandidate,
        OrderSelection as OrderSelection,
        select_order as select_order,
    )
    from ._sysid.propagate import (
        monte_carlo as monte_carlo,
        propagate_std as propagate_std,
    )
    from ._sysid.channel_names import ChannelNames as ChannelNames
    from ._sysid.present import present as present
    from ._sysid.python_control import (
        from_control as from_control,
        to_control as to_control,
    )
    from ._sysid.response import (
        frequency_response as frequency_response,
        impulse_response as impulse_response,
        Modes as Modes,
        modes as modes,
        step_response as step_response,
    )
    from ._sysid.spectral import (
        spectral_estimate as spectral_estimate,
        SpectralEstimate as SpectralEstimate,
    )
    from ._sysid.subspace import (
        fit_subspace as fit_subspace,
        subspace_singular_values as subspace_singular_values,
    )
    from ._sysid.validation import (
        compare as compare,
        Comparison as Comparison,
        predict as predict,
        residual_analysis as residual_analysis,
        Residuals as Residuals,
    )

    # Systems: what steps.
    from ._systems.controller import (
        AbstractController as AbstractController,
        LinearFeedback as LinearFeedback,
        MLPController as MLPController,
    )
    from ._systems.innovation import InnovationSystem as InnovationSystem
    from ._systems.layered import (
        AbstractContextLayer as AbstractContextLayer,
        AbstractLayeredController as AbstractLayeredController,
        ContextLayer as ContextLayer,
        LayeredController as LayeredController,
        StackedController as StackedController,
    )
    from ._systems.neural_state_space import NeuralStateSpace as NeuralStateSpace
    from ._systems.ode import (
        AbstractODE as AbstractODE,
        discretize as discretize,
        Discretized as Discretized,
        LinearODE as LinearODE,
        Sampled as Sampled,
    )
    from ._systems.stable import StableLinearSystem as StableLinearSystem
    from ._systems.system import (
        AbstractSystem as AbstractSystem,
        LinearSystem as LinearSystem,
    )


def _exports() -> dict[str, str]:
    """`{name: module}` of each name imported in the `TYPE_CHECKING` block above,
    read from this file once (the block is the one list of the public API)."""
    global _EXPORTS
    if _EXPORTS is None:
        import ast
        import pathlib

        tree = ast.parse(pathlib.Path(__file__).read_text(encoding="utf-8"))
        (block,) = (
            node
            for node in tree.body
            if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        )
        _EXPORTS = {
            alias.asname or alias.name: "." * node.level + (node.module or "")
            for node in block.body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
    return _EXPORTS


_EXPORTS: dict[str, str] | None = None
# Submodules reachable as attributes without an import statement, as they were when
# this file imported everything (`dynsys.plot`, `dynsys.models`, `dynsys._fitting`).
_SUBMODULES = frozenset(
    {
        "models",
        "plot",
        "cli",
        "_custom_types",
        "_data",
        "_distributed",
        "_experiments",
        "_fitting",
        "_io",
        "_rollout",
        "_sysid",
        "_systems",
    }
)


def __getattr__(name: str):
    import importlib

    module = _exports().get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value  # later reads skip this function
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name == "__all__":  # `from dynsys import *`: every public name
        return sorted(_exports())
    if name == "__version__":
        import importlib.metadata

        version = importlib.metadata.version("dynsys")
        globals()[name] = version
        return version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_exports()) | {"__version__"})
