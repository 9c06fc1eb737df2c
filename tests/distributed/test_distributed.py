"""Several processes (jax.distributed, gloo CPU collectives) equal one process.

The multi-process test starts two Python processes on this machine, each with two
simulated CPU devices; they join with `dynsys.initialize_distributed` on a free
loopback port, each loads half of the experiments, and `global_dataset` makes one
dataset of all of them. Their `fit` (full batch and minibatches) and sharded
`rollout` are compared with the plain single-process ones computed here.
"""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys


# The experiments, the same in every process (and in this one, for the reference).
PROBLEM = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    import dynsys

    N, T = 8, 30
    keys = jax.random.split(jax.random.key(0), 3)
    K = jnp.array([[0.9, 0.2, 0.0], [-0.2, 0.85, 0.1], [0.0, 0.0, 0.7]])
    B = jnp.array([[0.0], [1.0], [0.5]])
    x0s = jax.random.normal(keys[0], (N, 3))
    us = jax.random.normal(keys[1], (N, T, 1))
    full = dynsys.simulate(dynsys.LinearSystem(K, B), x0s, T, inputs=us,
                           measurement_noise=0.05, key=keys[2])
    start = dynsys.LinearSystem(0.5 * jnp.eye(3), jnp.zeros((3, 1)))
    FIT = dict(solver=optax.adam(1e-2), num_steps=15, progress=False)
    MINIBATCH = dict(FIT, batch_size=4, key=jax.random.key(1))

    def train_loss(model, batch):  # for dynsys.train on minibatches
        traj = dynsys.rollout(model, batch["xs"][:, 0], T, inputs=batch["us"])
        return jnp.mean((traj.xs - batch["xs"]) ** 2)
        """
)

WORKER = (
    textwrap.dedent(
        """
    import sys
    process_id, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_numpy_rank_promotion", "raise")
    import dynsys
    address = f"127.0.0.1:{port}"
    dynsys.initialize_distributed(address, 2, process_id,
                                  coordinator_bind_address=address,
                                  initialization_timeout=60)
    assert jax.process_count() == 2 and len(jax.devices()) == 4, jax.devices()
    assert len(jax.local_devices()) == 2
    from jax.experimental import multihost_utils
    """
    )
    + PROBLEM
    + textwrap.dedent(
        """
    mine = np.arange(4 * process_id, 4 * process_id + 4)
    data = dynsys.global_dataset(full[mine])
    assert data.xs.shape == (8, T + 1, 3) and data.us.shape == (8, T, 1)
    assert not data.xs.is_fully_addressable
    assert {s.index[0].start for s in data.xs.addressable_shards} == {
        4 * process_id, 4 * process_id + 2}

    whole = dynsys.fit(start, data, **FIT)
    batches = dynsys.fit(start, data, **MINIBATCH)
    default = dynsys.fit(start, data, progress=False)  # Levenberg–Marquardt
    trained = dynsys.train(train_loss, start, data={"xs": data.xs, "us": data.us},
                           **MINIBATCH)
    traj = dynsys.rollout(whole.model, data.xs[:, 0], T, inputs=data.us)
    assert not traj.xs.is_fully_addressable
    xs = multihost_utils.process_allgather(traj.xs, tiled=True)

    try:
        dynsys.global_dataset(full[: 2 + 2 * process_id])
    except ValueError as error:
        mismatch = str(error)
    else:
        mismatch = ""
    try:
        dynsys.global_dataset(full[:3])
    except ValueError as error:
        indivisible = str(error)
    else:
        indivisible = ""
    try:
        dynsys.global_dataset(dynsys.Dataset(full.xs[mine], full.us[mine],
                                             ts=np.arange(T + 1.0) * (1 + process_id)))
    except ValueError as error:
        times = str(error)
    else:
        times = ""
    np.savez(f"{out}/process-{process_id}.npz", times=times, K=whole.model.K,
             B=whole.model.B, losses=whole.losses, K_batches=batches.model.K,
             losses_batches=batches.losses, K_default=default.model.K,
             B_default=default.model.B, losses_default=default.losses,
             K_train=trained.final_model.K, losses_train=trained.losses,
             fit_percent=whole.metrics["train"]["fit_percent"], xs=xs,
             mismatch=mismatch, indivisible=indivisible,
             cache=str(dynsys.use_compile_cache()))

    # The command line in the same processes: `dynsys run CONFIG --distributed`.
    import contextlib
    import io
    from dynsys import cli
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = cli.main(["run", f"{out}/config.toml", "--distributed",
                         "--out-root", f"{out}/runs", "--no-progress"])
    assert code == 0, printed.getvalue()
    with open(f"{out}/printed-{process_id}.txt", "w") as file:
        file.write(printed.getvalue())
    print("DISTRIBUTED OK", process_id, flush=True)
    """
    )
)

# A small fit experiment: 4 training trajectories, one per device.
CONFIG = """
kind = "fit"
name = "distributed"
seed = 0
[system]
model = "mass_spring_damper"
[data]
trajectories = 5
length = 20
validation = 0.2
[fit]
steps = 5
lr = 1e-3
"""

# Both processes finish in well under a minute on a quiet 2-core machine; the limit
# leaves room for a loaded one, and the test kills them and fails after it.
TIME_LIMIT = 240.0


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(processes) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    for process in processes:
        process.wait()


def _run_two_processes(out: pathlib.Path) -> None:
    """Start the two workers; fail (and kill both) on an error or after TIME_LIMIT."""
    env = {
        **os.environ,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")
        + " --xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        # A cache folder, which the processes of a run on CPU must not use.
        "DYNSYS_CACHE_DIR": str(out / "cache"),
    }
    for name in ("DYNSYS_COORDINATOR", "DYNSYS_NUM_PROCESSES", "DYNSYS_PROCESS_ID"):
        env.pop(name, None)
    port = _free_loopback_port()
    logs = [out / f"log-{i}.txt" for i in range(2)]
    processes = []
    try:
        for i in range(2):
            with open(logs[i], "w") as log:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-c", WORKER, str(i), str(port), str(out)],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,  # its own group: killed as one
                    )
                )
        deadline = time.monotonic() + TIME_LIMIT
        while time.monotonic() < deadline:
            codes = [p.poll() for p in processes]
            if any(code != 0 for code in codes if code is not None):
                break  # one failed: the other would wait for it
            if all(code == 0 for code in codes):
                break
            time.sleep(0.2)
    finally:
        codes = [p.poll() for p in processes]
        _stop(processes)
    text = "\n".join(
        f"--- process {i}:\n{logs[i].read_text()[-4000:]}" for i in range(2)
    )
    if any(code is None for code in codes):
        pytest.fail(f"the two processes did not finish within {TIME_LIMIT} s\n{text}")
    assert codes == [0, 0], f"exit codes {codes}\n{text}"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:fit. no better than the start")  # 5 Adam steps
def test_two_processes_fit_and_rollout_equal_one_process(tmp_path):
    (tmp_path / "config.toml").write_text(CONFIG)
    _run_two_processes(tmp_path)
    results = [np.load(tmp_path / f"process-{i}.npz") for i in range(2)]

    # No compiled program kept: process 1 reading what process 0 compiled breaks
    # their collectives on the next run of the same shapes.
    for result in results:
        assert "one of several processes of a jax.distributed run on CPU" in str(
            result["cache"]
        )
    for pattern in ("**/*-cache", "**/*.entry", "**/*.program"):  # JAX's, dynsys's
        assert not any((tmp_path / "cache").glob(pattern)), pattern

    # Every process ends with the same model, bit for bit.
    for name in (
        *("K", "B", "losses", "K_batches", "losses_batches", "xs"),
        *("K_default", "B_default", "losses_default", "K_train", "losses_train"),
    ):
        np.testing.assert_array_equal(results[1][name], results[0][name], name)

    # The plain single-process fit and rollout on all the experiments.
    problem: dict = {}
    exec(PROBLEM, problem)
    full, start = problem["full"], problem["start"]
    whole = dynsys.fit(start, full, **problem["FIT"])
    batches = dynsys.fit(start, full, **problem["MINIBATCH"])
    xs = dynsys.rollout(whole.model, full.xs[:, 0], full.num_steps, inputs=full.us).xs
    got = results[0]
    np.testing.assert_allclose(got["K"], whole.model.K, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(got["B"], whole.model.B, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(got["losses"], whole.losses, rtol=1e-6)
    np.testing.assert_allclose(
        got["fit_percent"], whole.metrics["train"]["fit_percent"], rtol=1e-6
    )
    np.testing.assert_allclose(got["K_batches"], batches.model.K, rtol=1e-6)
    np.testing.assert_allclose(got["losses_batches"], batches.losses, rtol=1e-6)
    np.testing.assert_allclose(got["xs"], xs, rtol=1e-6, atol=1e-12)
    trained = dynsys.train(
        problem["train_loss"],
        start,
        data={"xs": full.xs, "us": full.us},
        **problem["MINIBATCH"],
    )
    np.testing.assert_allclose(got["K_train"], trained.final_model.K, rtol=1e-6)
    np.testing.assert_allclose(got["losses_train"], trained.losses, rtol=1e-6)
    # The default optimiser (Levenberg–Marquardt on the residuals): the same model;
    # its stopping test may end one step apart, on a difference at round-off.
    default = dynsys.fit(start, full, progress=False)
    np.testing.assert_allclose(got["K_default"], default.model.K, rtol=1e-6)
    np.testing.assert_allclose(got["B_default"], default.model.B, rtol=1e-6)
    steps = min(len(got["losses_default"]), len(default.losses))
    assert abs(len(got["losses_default"]) - len(default.losses)) <= 1
    np.testing.assert_allclose(
        got["losses_default"][:steps], default.losses[:steps], rtol=1e-6
    )
    assert default.losses[-1] < 0.01 * default.losses[0]
    # The fit moved: a comparison with the start would not be trivially equal.
    assert not np.allclose(got["K"], start.K, atol=1e-3)

    # Processes holding different numbers of experiments: one error, everywhere.
    for result in results:
        assert (
            "every process must hold the same number of experiments of the same "
            "length and columns (N, T, n, m, p); process 0 has (2, 30, 3, 1, 0), "
            "process 1 has (4, 30, 3, 1, 0)" in str(result["mismatch"])
        )
    assert (
        "process 0 has N_local = 3 experiments, which must be a multiple of its 2 "
        "device(s) in the sharding" in str(results[0]["indivisible"])
    )
    assert (
        "every process must have the same sample times ts; process 1 and process 0 "
        "differ" in str(results[1]["times"])
    )
    _check_command_line_run(tmp_path)


def test_global_dataset_in_one_process_shards_over_local_devices():
    xs = jnp.arange(2 * 4 * 3.0).reshape(2, 4, 3)
    data = dynsys.Dataset(xs, jnp.ones((2, 3, 1)), ts=jnp.arange(4.0))
    out = dynsys.global_dataset(data)
    np.testing.assert_array_equal(out.xs, data.xs)
    np.testing.assert_array_equal(out.us, data.us)
    np.testing.assert_array_equal(out.ts, data.ts)
    assert out.state_names == data.state_names
    assert out.xs.sharding.spec == jax.sharding.PartitionSpec("batch")


def test_global_dataset_needs_a_dataset():
    with pytest.raises(TypeError, match=r"global_dataset\(local_data=...\)"):
        dynsys.global_dataset(jnp.ones((2, 3, 1)))


def test_initialize_distributed_needs_all_three(monkeypatch):
    for name in ("DYNSYS_COORDINATOR", "DYNSYS_NUM_PROCESSES", "DYNSYS_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DYNSYS_NUM_PROCESSES", "2")
    with pytest.raises(
        ValueError,
        match=r"initialize_distributed: give all three .* missing coordinator_address "
        r"\(DYNSYS_COORDINATOR\), process_id \(DYNSYS_PROCESS_ID\)",
    ):
        dynsys.initialize_distributed()
    monkeypatch.setenv("DYNSYS_NUM_PROCESSES", "two")
    with pytest.raises(ValueError, match=r"DYNSYS_NUM_PROCESSES must be an integer"):
        dynsys.initialize_distributed()
    with pytest.raises(ValueError, match=r"expected 0 <= process_id < num_processes"):
        dynsys.initialize_distributed("127.0.0.1:1", 2, 2)


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        elif isinstance(value, float) and "seconds" not in key:
            out[prefix + key] = value
    return out


def _check_command_line_run(tmp_path: pathlib.Path) -> None:
    """`dynsys run --distributed` in the two processes: one run folder, written and
    reported by process 0 only, with the metrics of a run in one process."""
    import json

    folders = list((tmp_path / "runs").iterdir())
    assert [f.name.startswith("distributed-") for f in folders] == [True], folders
    assert "wrote " in (tmp_path / "printed-0.txt").read_text()
    assert (tmp_path / "printed-1.txt").read_text() == ""
    many = json.loads((folders[0] / "metrics.json").read_text())
    one = dynsys.run_experiment(
        tmp_path / "config.toml",
        out_root=tmp_path / "one",
        progress=False,
        echo=None,
    ).metrics
    expected, got = _flat(one), _flat(many)
    assert expected.keys() == got.keys() and len(expected) > 10
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-6, err_msg=key)


def test_initialize_distributed_without_a_launcher():
    # In a fresh process: JAX joins only before its backend starts.
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DYNSYS_", "SLURM_", "OMPI_", "PMIX_", "JAX_COORD"))
    }
    code = (
        "import jax, dynsys\n"
        "try:\n"
        "    dynsys.initialize_distributed()\n"
        "except ValueError as error:\n"
        "    print(error)\n"
        "print(jax.distributed.is_initialized(), len(jax.devices()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**env, "JAX_PLATFORMS": "cpu"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        "initialize_distributed: no launcher found (Slurm srun, Open MPI mpirun, "
        "Cloud TPU) and DYNSYS_COORDINATOR, DYNSYS_NUM_PROCESSES and "
        "DYNSYS_PROCESS_ID are not set"
    ), result.stdout
    assert lines[1].startswith("False "), result.stdout  # and JAX still works
