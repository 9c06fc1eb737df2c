"""Sharded rollouts and training on 4 simulated CPU devices equal single-device runs."""

import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import pytest

import dynsys


SCRIPT = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_numpy_rank_promotion", "raise")
    import jax.numpy as jnp
    import numpy as np
    import optax
    import dynsys

    assert len(jax.devices()) == 4, jax.devices()
    keys = jax.random.split(jax.random.key(0), 5)
    K = 0.4 * jax.random.normal(keys[0], (3, 3))
    B = jax.random.normal(keys[1], (3, 2))
    x0 = jax.random.normal(keys[2], (8, 3))
    inputs = jax.random.normal(keys[3], (8, 20, 2))
    system = dynsys.LinearSystem(K, B)
    sharded = dynsys.shard_batch({"x0": x0, "inputs": inputs})
    assert not sharded["x0"].sharding.is_fully_replicated
    assert len(sharded["inputs"].sharding.device_set) == 4

    # Rollouts and their gradients: sharded equals single-device, output stays sharded.
    for method in [dynsys.Sequential(), dynsys.Chunked(4), dynsys.Parallel(), None]:
        def loss(K, x0, inputs):
            traj = dynsys.rollout(dynsys.LinearSystem(K, B), x0, 20, inputs=inputs,
                                  method=method)
            return jnp.mean(traj.xs ** 2), traj.xs
        f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
        (l1, xs1), g1 = f(K, x0, inputs)
        (l2, xs2), g2 = f(K, sharded["x0"], sharded["inputs"])
        assert not xs2.sharding.is_fully_replicated, (method, xs2.sharding)
        np.testing.assert_allclose(xs2, xs1, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(l2, l1, rtol=1e-12)
        for a, b in zip(g2, g1):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)

    # A few train steps on minibatches of sharded data: same models, sharded batches.
    targets = dynsys.rollout(system, x0, 20, inputs=inputs).xs
    data = {"x0": x0, "inputs": inputs, "xs": targets}
    seen = []

    def train_loss(model, batch):
        jax.debug.inspect_array_sharding(batch["x0"], callback=seen.append)
        traj = dynsys.rollout(model, batch["x0"], 20, inputs=batch["inputs"])
        return jnp.mean((traj.xs - batch["xs"]) ** 2)

    start = dynsys.LinearSystem(0.5 * K, B)
    kwargs = dict(solver=optax.adam(1e-2), num_steps=5, batch_size=4,
                  key=jax.random.key(1), progress=False)
    single = dynsys.train(train_loss, start, data=data, **kwargs)
    seen.clear()
    many = dynsys.train(train_loss, start, data=dynsys.shard_batch(data), **kwargs)
    assert seen and not seen[0].is_fully_replicated, seen
    np.testing.assert_allclose(many.losses, single.losses, rtol=1e-10)
    np.testing.assert_allclose(many.final_model.K, single.final_model.K, rtol=1e-10)

    try:
        dynsys.shard_batch(jnp.ones((6, 3)))
    except ValueError as error:
        assert "multiple of the number of devices (4), got shape (6, 3)" in str(error)
    else:
        raise AssertionError("no error")
    print("SHARDING OK")
    """
)


def test_sharded_equals_single_device_on_4_simulated_devices():
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SHARDING OK" in result.stdout


def test_shard_batch_on_one_device_keeps_values():
    x0 = jnp.arange(6.0).reshape(2, 3)
    out = dynsys.shard_batch({"x0": x0, "name": "kept"})
    assert out["name"] == "kept"
    assert jnp.array_equal(out["x0"], x0)


def test_shard_batch_needs_a_leading_axis():
    with pytest.raises(
        ValueError,
        match=r"shard_batch\(tree=...\): the array at .* needs a leading batch axis.*got shape \(\)",
    ):
        dynsys.shard_batch({"scale": jnp.array(1.0)})


def test_batch_sharding_needs_devices():
    with pytest.raises(ValueError, match=r"batch_sharding\(devices=...\): no devices"):
        dynsys.batch_sharding([])
