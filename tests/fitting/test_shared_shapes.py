"""Fits padded to shapes this machine compiled before (`_compile/known_shapes.py`):
the record lengths of `shared_length` and the model sizes of `shared_size`, in
this process and in the cache folder's `shapes` file."""

import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._compile import cache, known_shapes
from dynsys._fitting.length_buckets import (
    LONGEST_SHARED,
    padded_length,
    shared_length,
)
from dynsys._fitting.padded import shared_size


def test_a_known_length_is_taken_up_to_twice_the_record():
    assert shared_length(300, "a") == padded_length(300) == 320
    assert shared_length(200, "a") == 320  # known, and at most 400
    assert shared_length(150, "a") == padded_length(150) == 160  # 320 > 2 x 150
    assert shared_length(200, "b") == padded_length(200) == 224  # other shapes
    assert shared_length(310, "a") == 320
    assert shared_length(330, "a") == padded_length(330) == 384
    assert shared_length(321, "a") == 384  # now known
    assert known_shapes.known("length/a") == {320, 160, 384}


def test_a_long_record_is_padded_to_its_own_bucket():
    long = LONGEST_SHARED + 100
    known_shapes.remember("length/a", 2 * LONGEST_SHARED)
    assert shared_length(long, "a") == padded_length(long) < 2 * LONGEST_SHARED


def _data(samples, inputs=1, outputs=2):
    return dynsys.Dataset(
        us=jnp.zeros((1, samples, inputs)), ys=jnp.zeros((1, samples, outputs))
    )


def test_a_known_size_is_taken_up_to_two_more_states_with_a_feedthrough_if_needed():
    def anything(order, feedthrough):
        return True

    data = _data(50)
    assert shared_size(6, False, data, anything) == (6, False)
    assert shared_size(5, False, data, anything) == (6, False)
    assert shared_size(4, True, data, anything) == (4, True)  # (6, False) lacks a D
    assert shared_size(4, False, data, anything) == (4, True)  # D held at zero
    assert shared_size(3, False, data, anything) == (4, True)
    assert shared_size(1, False, data, anything) == (1, False)  # 4 > 1 + 2
    assert shared_size(3, False, _data(50, inputs=2), anything) == (3, False)
    # A known size the predicate refuses (e.g. too large a padded Jacobian).
    assert shared_size(2, True, data, lambda n, d: n < 4) == (2, True)


def test_the_shapes_file_is_read_by_the_next_process_and_only_a_hint(
    tmp_path, monkeypatch, pristine_cache
):
    cache.use_compile_cache(tmp_path / "cache")
    path = tmp_path / "cache" / cache.KEPT_SUBFOLDER / known_shapes.FILE_NAME
    known_shapes.remember("length/a", 320)
    known_shapes.remember("length/a", 320)  # written once
    assert path.read_text() == "length/a 320\n"
    with open(path, "a") as file:
        file.write("not a pair\nlength/a x\n\x00\nlength/b 7\n")
    monkeypatch.setattr(known_shapes, "_in_memory", set())  # a new process
    assert known_shapes.known("length/a") == {320}
    assert known_shapes.known("length/b") == {7}
    assert shared_length(200, "a") == 320
    path.unlink()
    path.mkdir()  # unreadable and unwritable as a file: no hint, no error
    monkeypatch.setattr(known_shapes, "_in_memory", set())
    assert shared_length(200, "a") == 224
    assert known_shapes.known("length/a") == {224}  # in this process still
    path.rmdir()
    elsewhere = tmp_path / "a file of the user's"
    elsewhere.write_text("length/a 320\n")
    path.symlink_to(elsewhere)  # a link is neither read nor appended to
    monkeypatch.setattr(known_shapes, "_in_memory", set())
    assert shared_length(200, "a") == 224
    assert elsewhere.read_text() == "length/a 320\n"


@pytest.mark.usefixtures("no_persistent_cache")
def test_a_fit_padded_to_a_known_length_equals_the_fit_at_its_own():
    """The same fit of an 87-sample record, padded to its own bucket (96) and to a
    length a longer record made known (112): the same losses and model, to the
    rounding of a sum in another order."""
    rng = np.random.default_rng(0)
    true = dynsys.LinearSystem(
        K=jnp.array([[0.8, 0.2], [-0.2, 0.7]]), B=jnp.array([[1.0], [0.5]]),
        C=jnp.array([[1.0, 0.0]]),
    )  # fmt: skip
    us = rng.normal(size=(1, 130, 1))
    ys = dynsys.rollout(true, jnp.zeros((1, 2)), 130, inputs=jnp.asarray(us)).ys
    ys = np.asarray(ys) + 0.01 * rng.normal(size=ys.shape)
    train, val = dynsys.Dataset(ys=ys, us=us).split_time(1 / 3, min_samples=4)
    start = dynsys.fit_subspace(train, 2)
    options = dict(val_data=val, num_steps=5, progress=False)
    own = dynsys.fit(start, train, **options)
    assert known_shapes.known(next(iter(_lengths()))) == {96}
    known_shapes.remember(next(iter(_lengths())), 112)
    known_shapes._in_memory.discard((next(iter(_lengths())), 96))
    padded = dynsys.fit(start, train, **options)
    assert known_shapes.known(next(iter(_lengths()))) == {112}
    np.testing.assert_allclose(padded.losses, own.losses, rtol=1e-9)
    np.testing.assert_allclose(padded.val_losses, own.val_losses, rtol=1e-9)
    np.testing.assert_allclose(
        np.asarray(padded.model.K), np.asarray(own.model.K), rtol=1e-7, atol=1e-9
    )


def _lengths():
    """The length signatures this process knows."""
    return {name for name, _ in known_shapes._in_memory if name.startswith("length/")}


def test_a_computation_compiled_ahead_remembers_no_shape():
    """The refit compiled ahead on a thread looks shapes up but remembers none:
    what the run's own fits pad to never depends on the thread's timing."""
    from dynsys._compile import kept_programs

    with kept_programs.compiling_ahead():
        assert shared_length(300, "a") == 320
    assert known_shapes.known("length/a") == set()
    assert shared_length(200, "a") == padded_length(200) == 224
