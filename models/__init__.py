"""The dynsys model zoo: declared systems, importable as `dynsys.models`.

`ZOO` maps a model's name to a function building it (keyword arguments are the
model's parameters); `get(name, **params)` builds one by name.
"""

from collections.abc import Callable

import dynsys

from .lotka_volterra import (
    lotka_volterra as lotka_volterra,
    LotkaVolterra as LotkaVolterra,
)
from .mass_spring_damper import (
    mass_spring_damper as mass_spring_damper,
    mass_spring_damper_matrices as mass_spring_damper_matrices,
)
from .pendulum import Pendulum as Pendulum
from .pendulum_ode import pendulum_ode as pendulum_ode, PendulumODE as PendulumODE
from .van_der_pol import van_der_pol as van_der_pol, VanDerPol as VanDerPol


ZOO: dict[str, Callable[..., dynsys.AbstractSystem]] = {
    "mass_spring_damper": mass_spring_damper,
    "pendulum": Pendulum,
    "pendulum_ode": pendulum_ode,
    "van_der_pol": van_der_pol,
    "lotka_volterra": lotka_volterra,
}


def get(name: str, **params) -> dynsys.AbstractSystem:
    """Build the zoo model `name` with the given parameters.

    **Raises:**

    `ValueError` naming the allowed models when `name` is unknown.
    """
    if name not in ZOO:
        raise ValueError(
            f"get(name=...): unknown model {name!r}; allowed: {', '.join(sorted(ZOO))}."
        )
    return ZOO[name](**params)
