"""The dynsys model zoo: declared systems, importable as `dynsys.models`.

`ZOO` maps a model's name to a function building it (keyword arguments are the
model's parameters); `get(name, **params)` builds one by name; `names(name, **params)`
gives its state, input and output names with units (for figures and tables).
"""

from collections.abc import Callable

from .._systems.system import AbstractSystem

from ._names import Names as Names
from .lotka_volterra import (
    lotka_volterra as lotka_volterra,
    lotka_volterra_names as lotka_volterra_names,
    LotkaVolterra as LotkaVolterra,
)
from .mass_spring_damper import (
    mass_spring_damper as mass_spring_damper,
    mass_spring_damper_matrices as mass_spring_damper_matrices,
    mass_spring_damper_names as mass_spring_damper_names,
)
from .pendulum import Pendulum as Pendulum, pendulum_names as pendulum_names
from .pendulum_ode import pendulum_ode as pendulum_ode, PendulumODE as PendulumODE
from .van_der_pol import (
    van_der_pol as van_der_pol,
    van_der_pol_names as van_der_pol_names,
    VanDerPol as VanDerPol,
)


ZOO: dict[str, Callable[..., AbstractSystem]] = {
    "mass_spring_damper": mass_spring_damper,
    "pendulum": Pendulum,
    "pendulum_ode": pendulum_ode,
    "van_der_pol": van_der_pol,
    "lotka_volterra": lotka_volterra,
}

NAMES: dict[str, Callable[..., Names]] = {
    "mass_spring_damper": mass_spring_damper_names,
    "pendulum": pendulum_names,
    "pendulum_ode": pendulum_names,
    "van_der_pol": van_der_pol_names,
    "lotka_volterra": lotka_volterra_names,
}


def get(name: str, **params) -> AbstractSystem:
    """Build the zoo model `name` with the given parameters.

    **Raises:**

    `ValueError` naming the allowed models when `name` is unknown.
    """
    if name not in ZOO:
        raise ValueError(
            f"get(name=...): unknown model {name!r}; allowed: {', '.join(sorted(ZOO))}."
        )
    return ZOO[name](**params)


def names(name: str, **params) -> Names:
    """The state, input and output names, with units, of the zoo model `name` built
    with `params` (only those that change the channels matter, e.g. `num_masses`).

    **Raises:**

    `ValueError` naming the allowed models when `name` is unknown.

    **Example:**

    ```python
    import dynsys.models as zoo
    print(zoo.names("pendulum").states)  # ('θ (rad)', 'ω (rad/s)')
    ```
    """
    if name not in NAMES:
        raise ValueError(
            f"names(name=...): unknown model {name!r}; allowed: "
            f"{', '.join(sorted(NAMES))}."
        )
    return NAMES[name](**params)
