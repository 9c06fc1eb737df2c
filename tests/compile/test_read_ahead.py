"""Kept programs read ahead (`dynsys/_compile/read_ahead.py`): the programs listed after a
run's first are loaded on a thread in their order and handed over once each; one
the caller reached first is left to it; the list is written again only when the
run's keys differ; and in a new process the programs come from the thread, with
the same results as loading them one by one."""

import os
import pathlib
import threading

import pytest

from dynsys._compile import entry_file as _entry_file, jit as _jit
from dynsys._compile import read_ahead as _read_ahead

from ..helpers import json_from_child


def _loader(calls: list, fail: str = ""):
    def load(path: pathlib.Path, key: str):
        calls.append((path.name, threading.current_thread().name))
        if key == fail:
            raise OSError("unreadable")
        return f"program {key}"

    return load


def _listed_run(folder: pathlib.Path, keys: list[str]) -> _read_ahead._Run:
    name = "first" + _read_ahead.NEXT_SUFFIX  # a checked entry, as dynsys writes it
    _entry_file.write(folder / name, name, ("\n".join(keys) + "\n").encode())
    return _read_ahead._Run(folder, "first", ".program")


def test_listed_programs_are_loaded_in_order_on_a_thread_and_handed_over_once(
    tmp_path,
):
    run = _listed_run(tmp_path, ["b", "c", "d"])
    calls = []
    run.start(_loader(calls, fail="d"))
    run.thread.join()
    assert calls == [("b.program", "read-ahead"), ("c.program", "read-ahead")] + [
        ("d.program", "read-ahead")
    ]
    assert run.take("c") == "program c"
    assert run.take("b") == "program b"
    assert run.take("b") is None  # handed over once; the caller keeps it
    assert run.take("d") is None  # failed: the caller loads it and sees why
    assert run.take("e") is None  # not listed


def test_a_program_the_caller_reaches_first_is_left_to_it(tmp_path):
    run = _listed_run(tmp_path, ["b", "c"])
    assert run.take("c") is None  # not started yet: the caller loads it
    calls = []
    run.start(_loader(calls))
    run.thread.join()
    assert calls == [("b.program", "read-ahead")]
    assert run.take("b") == "program b"


def test_the_list_is_written_again_only_when_the_keys_differ(tmp_path):
    run = _listed_run(tmp_path, ["b", "c"])
    listing = tmp_path / ("first" + _read_ahead.NEXT_SUFFIX)
    listing.unlink()
    for key in ["b", "c", "b"]:
        run.note(key)
    run.write()
    assert not listing.exists()  # the same keys: nothing written
    run.note("z")
    run.write()
    assert _entry_file.read(listing, listing.name) == b"b\nc\nz\n"
    assert _read_ahead._Run(tmp_path, "first", ".program").listed == ["b", "c", "z"]


def test_an_unreadable_list_reads_nothing_ahead(tmp_path):
    (tmp_path / ("first" + _read_ahead.NEXT_SUFFIX)).write_bytes(b"\xff\xfe../x\n")
    run = _read_ahead._Run(tmp_path, "first", ".program")
    assert run.listed == []
    run.start(_loader([]))
    assert run.thread is None


def test_a_list_that_is_not_a_checked_regular_file_reads_nothing_ahead(tmp_path):
    listing = tmp_path / ("first" + _read_ahead.NEXT_SUFFIX)
    listing.write_text("b\nc\n")  # no header and digest: damaged or foreign
    assert _read_ahead._Run(tmp_path, "first", ".program").listed == []
    listing.unlink()
    os.mkfifo(listing)  # never waited on
    assert _read_ahead._Run(tmp_path, "first", ".program").listed == []


def test_a_process_that_did_not_ask_reads_nothing_ahead(tmp_path, monkeypatch):
    monkeypatch.setitem(_read_ahead._state, "enabled", False)
    monkeypatch.setitem(_read_ahead._state, "run", None)
    assert _read_ahead.taken(tmp_path, "first", ".program", _loader([])) is None
    assert _read_ahead._state["run"] is None


# Three kept programs (one function, three static values) in one process; the
# second process's read-ahead thread is joined before the later two are called.
_HELPER = """
import jax.numpy as jnp

TRACES = []


def program(x, n):
    TRACES.append(n)
    return jnp.linalg.svd(jnp.outer(jnp.cumsum(x * n), x), compute_uv=False)
"""

_RUN = """
import json, pathlib, sys
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from dynsys._compile import (
    kept_programs as _kept_programs,
    program_key as _program_key,
    read_ahead as _read_ahead,
)
import ahead_helper

folder = pathlib.Path(sys.argv[1])
_kept_programs._folder = lambda: folder
_program_key._NAMED_ROOTS = _program_key._NAMED_ROOTS | {"ahead_helper"}
_read_ahead.enable_for_process()
program = _kept_programs.KeptProgram(ahead_helper.program, {})
taken, take = [], _read_ahead._Run.take
_read_ahead._Run.take = lambda run, key: taken.append(take(run, key)) or taken[-1]
outputs = [program(np.arange(4.0), 2)]
run = _read_ahead._state["run"]
if run.thread is not None:
    run.thread.join()
outputs += [program(np.arange(4.0), n) for n in (3, 4)]
print(json.dumps({
    "traces": len(ahead_helper.TRACES),
    "read_ahead": sum(program is not None for program in taken),
    "outputs": [[float(v).hex() for v in out] for out in outputs],
}))
"""


def _run(tmp_path: pathlib.Path, folder: pathlib.Path) -> dict:
    (tmp_path / "ahead_helper.py").write_text(_HELPER)
    return json_from_child(_RUN, folder, cwd=tmp_path)


@pytest.mark.skipif(
    not _jit._keeps_programs(), reason="dynsys keeps no programs with this jaxlib"
)
@pytest.mark.slow
def test_a_new_process_takes_the_programs_read_ahead(tmp_path):
    folder = tmp_path / "programs"
    first = _run(tmp_path, folder)
    assert (first["traces"], first["read_ahead"]) == (3, 0)
    assert len(list(folder.glob("*.next"))) == 1
    second = _run(tmp_path, folder)
    assert (second["traces"], second["read_ahead"]) == (0, 2)
    assert second["outputs"] == first["outputs"]
