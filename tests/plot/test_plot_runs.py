"""The figures of the experiment kinds follow the plotting conventions: zoo names
with units, truth styling only with a known true model, several pages for many
states, the input bound drawn, and a physical sweep label."""

import jax
import jax.numpy as jnp
import matplotlib
import pytest

import dynsys
from dynsys._experiments.kinds import RUNNERS, sweep_label


def _outcome(config):
    matplotlib.use("Agg")
    resolved = dynsys.resolve_config(config)
    return RUNNERS[resolved["kind"]](resolved, progress=False, echo=lambda *a: None)


def _legend(fig) -> list[str]:
    (legend,) = fig.legends
    return [t.get_text() for t in legend.get_texts()]


FIT = {
    "kind": "fit",
    "seed": 1,
    "system": {"model": "mass_spring_damper", "params": {"num_masses": 7}},
    "data": {"trajectories": 3, "length": 12, "measurement_noise": 0.05},
    "fit": {"steps": 2, "lr": 1e-3},
}


def test_fit_figures_pages_names_and_roles():
    outcome = _outcome(FIT)
    assert list(outcome.figures) == [
        "trajectories.png", "trajectories_2.png", "eigenvalues.png", "loss.png"
    ]  # fmt: skip
    first, second = (
        outcome.figures["trajectories.png"],
        outcome.figures["trajectories_2.png"],
    )
    labels = [a.get_ylabel() for a in first.axes] + [
        a.get_ylabel() for a in second.axes
    ]
    assert labels == [f"p{i} (m)" for i in range(1, 8)] + [
        f"v{i} (m/s)" for i in range(1, 8)
    ]
    legend = _legend(first)
    assert legend[:2] == ["measured", "true system (noise-free)"]
    assert legend[2].startswith("least squares (mean fit ")
    styles = {line.get_label(): line.get_linestyle() for line in first.axes[0].lines}
    assert styles["true system (noise-free)"] == "-"
    assert styles[legend[2]] == "-." and styles[legend[3]] == "--"
    assert "true system" in _legend(outcome.figures["eigenvalues.png"])


def test_fit_on_a_data_file_draws_no_truth(tmp_path):
    system = dynsys.LinearSystem(
        K=jnp.array([[0.9, 0.1], [-0.1, 0.9]]), B=jnp.array([[0.0], [1.0]])
    )
    key_u, key_noise = jax.random.split(jax.random.key(0))
    data = dynsys.simulate(
        system, jnp.ones((3, 2)), 12, inputs=jax.random.normal(key_u, (3, 12, 1)),
        measurement_noise=0.05, key=key_noise,
    )  # fmt: skip
    data.save(tmp_path / "mine.npz")
    config = {**FIT, "system": {"model": "mass_spring_damper"},
              "data": {"file": str(tmp_path / "mine.npz")}}  # fmt: skip
    outcome = _outcome(config)
    for name in ("trajectories.png", "eigenvalues.png"):
        assert not any("true" in label for label in _legend(outcome.figures[name]))


def test_train_controller_figures_separate_units_and_draw_the_bound():
    config = {
        "kind": "train_controller",
        "system": {"model": "pendulum"},
        "controller": {"type": "mlp", "width": 4, "depth": 1, "bound": 5.0},
        "cost": {"target": [3.0, 0.0]},
        "train": {"horizon": 8, "initial_states": 4, "test_states": 3,
                  "batch_size": 2, "steps": 2, "spread": [0.3, 0.5]},
    }  # fmt: skip
    outcome = _outcome(config)
    fig = outcome.figures["closed_loop_before.png"]
    assert [a.get_ylabel() for a in fig.axes] == [
        "θ (rad)",
        "ω (rad/s)",
        "torque (N m)",
    ]
    levels = sorted(
        line.get_ydata()[0]
        for line in fig.axes[2].lines
        if line.get_label() == "input bound"
    )
    assert levels == [-5.0, 5.0]
    assert "one thin line per trajectory (3)" in _legend(fig)


@pytest.mark.parametrize(
    "key, expected",
    [
        ("data.measurement_noise", "std of the noise added to each measured state "
         "(m, m/s) [data.measurement_noise]"),
        ("fit.lr", "learning rate [fit.lr]"),
        ("data.validation", "data.validation"),
    ],
)  # fmt: skip
def test_sweep_label_names_the_quantity_and_unit(key, expected):
    config = dynsys.resolve_config({"kind": "fit"})
    assert sweep_label(config, key) == expected


def test_figures_are_drawn_with_the_earlier_objects_frozen():
    """The figure stages freeze the objects made before them (the garbage collector
    skips them) and unfreeze them after, also after an error; objects the caller
    froze stay frozen.

    Frozenness is read from one object, not from `gc.get_freeze_count()`: frozen
    objects that another thread frees meanwhile lower the count."""
    import gc

    from dynsys._experiments.runtime.heap import earlier_objects_frozen

    def frozen(marker):  # the permanent generation is not in gc.get_objects()
        return not any(o is marker for o in gc.get_objects())

    marker = [object()]
    assert not frozen(marker)
    with earlier_objects_frozen():
        assert frozen(marker)
        made_inside = [object()]
        assert not frozen(made_inside)
    assert not frozen(marker)
    with pytest.raises(RuntimeError), earlier_objects_frozen():
        raise RuntimeError
    assert not frozen(marker)
    gc.freeze()  # the caller's own frozen objects stay frozen
    try:
        with earlier_objects_frozen():
            assert frozen(marker)
        assert frozen(marker)
    finally:
        gc.unfreeze()
    assert not frozen(marker)
