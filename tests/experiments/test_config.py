"""Experiment configs: validation names the key and what is allowed; sweeps; TOML."""

import tomllib

import pytest

import dynsys
from dynsys._experiments.config import (
    apply_overrides,
    dump_toml,
    expand_sweep,
    Option,
    parse_override,
    resolve,
)


SCHEMA = {
    "": {"name": Option((str,), "run"), "seed": Option((int,), 0, low=0)},
    "data": {
        "noise": Option((float,), 0.1, low=0.0),
        "weights": Option((float, list), 1.0, items=float, low=0.0),
        "names": Option((list,), None, items=str),
    },
    "fit": {
        "loss": Option((str,), "simulation", ("simulation", "one_step")),
        "fast": Option((bool,), False),
        "fraction": Option((float,), 0.5, low=0.0, high=0.9),
    },
}


def test_defaults_and_int_to_float():
    config = resolve({"data": {"noise": 1, "weights": [1, 2.5]}}, SCHEMA)
    assert config == {
        "name": "run",
        "seed": 0,
        "data": {"noise": 1.0, "weights": [1.0, 2.5], "names": None},
        "fit": {"loss": "simulation", "fast": False, "fraction": 0.5},
    }
    assert isinstance(config["data"]["noise"], float)


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            {"fit": {"los": "x"}},
            r"unknown config key 'fit.los'; allowed keys in \[fit\]: fast, fraction, loss",
        ),
        (
            {"nam": "x"},
            r"unknown config key 'nam'; allowed keys in the top level: name, seed",
        ),
        (
            {"model": {}},
            r"unknown config section '\[model\]'; allowed sections: data, fit, sweep",
        ),
        ({"fit": 3}, r"config key 'fit': expected a table \[fit\], got int 3"),
        (
            {"fit": {"loss": "shooting"}},
            r"config key 'fit.loss': expected one of 'simulation', 'one_step', got 'shooting'",
        ),
        ({"seed": "1"}, r"config key 'seed': expected int, got str '1'"),
        ({"seed": True}, r"config key 'seed': expected int, got bool True"),
        ({"seed": -1}, r"config key 'seed': expected a finite value >= 0, got -1"),
        ({"fit": {"fast": 1}}, r"config key 'fit.fast': expected bool, got int 1"),
        (
            {"fit": {"fraction": 1.5}},
            r"config key 'fit.fraction': expected a finite value in \[0, 0.9\], got 1.5",
        ),
        (
            {"data": {"noise": float("nan")}},
            r"config key 'data.noise': expected a finite value >= 0, got nan",
        ),
        (
            {"data": {"weights": "a"}},
            r"config key 'data.weights': expected float or list, got str 'a'",
        ),
        (
            {"data": {"weights": [1.0, "a"]}},
            r"config key 'data.weights': expected a list of float, but item 1 is str 'a'",
        ),
        (
            {"data": {"weights": [1.0, -2.0]}},
            r"config key 'data.weights\[1\]': expected a finite value >= 0, got -2.0",
        ),
        (
            {"data": {"names": [1]}},
            r"config key 'data.names': expected a list of str, but item 0 is int 1",
        ),
    ],
)
def test_errors_name_the_key_and_what_is_allowed(raw, message):
    with pytest.raises(dynsys.ConfigError, match=message):
        resolve(raw, SCHEMA)
    assert issubclass(dynsys.ConfigError, ValueError)


def test_sweep_expands_one_run_per_value():
    config = resolve(
        {"sweep": {"key": "data.noise", "values": [0, 0.5]}, "fit": {"fast": True}},
        SCHEMA,
    )
    assert config["sweep"] == {"key": "data.noise", "values": [0.0, 0.5]}
    runs = expand_sweep(config)
    assert [label for label, _ in runs] == ["noise=0.0", "noise=0.5"]
    assert [c["data"]["noise"] for _, c in runs] == [0.0, 0.5]
    assert all("sweep" not in c and c["fit"]["fast"] for _, c in runs)
    assert "sweep" in config  # the original is not changed
    assert expand_sweep(resolve({}, SCHEMA)) == [("", resolve({}, SCHEMA))]


@pytest.mark.parametrize(
    "sweep, message",
    [
        (
            {"key": "data.noise", "value": [1]},
            r"unknown config key 'sweep.value'; allowed keys in \[sweep\]: key, seeds, values",
        ),
        (
            {"key": "noise", "values": [1]},
            r"config key 'sweep.key': expected 'section.key'",
        ),
        (
            {"key": "data.nois", "values": [1]},
            r"'data.nois' is not a config key; allowed: data.noise, data.weights, data.names, fit.loss",
        ),
        (
            {"key": "data.noise", "values": []},
            r"config key 'sweep.values': expected a non-empty list, got \[\]",
        ),
        (
            {"key": "data.noise", "values": [0.1, "x"]},
            r"config key 'data.noise': expected float, got str 'x'",
        ),
        (
            {"key": "fit.loss", "values": ["one_step", "x"]},
            r"config key 'fit.loss': expected one of",
        ),
    ],
)
def test_sweep_errors(sweep, message):
    with pytest.raises(dynsys.ConfigError, match=message):
        resolve({"sweep": sweep}, SCHEMA)


def test_dump_toml_round_trips():
    config = resolve(
        {
            "name": 'a "quoted" \\ name',
            "data": {"weights": [1.0, 2.0], "names": ["θ (rad)"]},
            "sweep": {"key": "data.noise", "values": [0.0, 1e-3, 12.5]},
        },
        SCHEMA,
    )
    config["fit"]["params"] = {"dt": 0.05, "num masses": 2}
    text = dump_toml(config)
    back = tomllib.loads(text)
    assert back == config
    assert "names" not in dump_toml(resolve({}, SCHEMA))  # None is left out
    with pytest.raises(TypeError, match="cannot write object"):
        dump_toml({"x": object()})


def test_overrides():
    assert parse_override("fit.steps=10") == ("fit.steps", 10)
    assert parse_override("system.model=pendulum") == ("system.model", "pendulum")
    assert parse_override("cost.Q = [1, 0.5]") == ("cost.Q", [1, 0.5])
    with pytest.raises(
        dynsys.ConfigError, match=r"override 'fit.steps': expected KEY=VALUE"
    ):
        parse_override("fit.steps")
    raw = {"fit": {"loss": "one_step"}}
    changed = apply_overrides(raw, ["fit.fast=true", "data.noise=0.5", "seed=3"])
    assert changed == {
        "fit": {"loss": "one_step", "fast": True},
        "data": {"noise": 0.5},
        "seed": 3,
    }
    assert raw == {"fit": {"loss": "one_step"}}
    assert (
        apply_overrides(raw, {"fit.loss": "simulation"})["fit"]["loss"] == "simulation"
    )
    with pytest.raises(
        dynsys.ConfigError, match=r"override 'seed.x': config key 'seed' is not a table"
    ):
        apply_overrides({"seed": 1}, ["seed.x=1"])
    # An override of an unknown key is caught by validation, naming it.
    with pytest.raises(dynsys.ConfigError, match=r"unknown config key 'fit.stepz'"):
        resolve(apply_overrides(raw, ["fit.stepz=1"]), SCHEMA)


def test_dump_toml_round_trips_control_characters():
    import tomllib

    from dynsys._experiments.config import dump_toml

    every = "".join(chr(c) for c in range(0x80)) + "é\u2028\U0001f600"
    config = {"description": every, "section": {"key\nwith newline": "a\r\nb"}}
    assert tomllib.loads(dump_toml(config)) == config
