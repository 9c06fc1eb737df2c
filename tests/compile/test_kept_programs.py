"""Compiled programs kept across runs (`dynsys/_compile/kept_programs.py`) and the key they
are filed under (`dynsys/_compile/program_key.py`): a kept program gives what
`equinox.filter_jit` gives, to the bit; a new process loads it without tracing; a
key names one program only (what tracing depends on changes it, what it does not
leave it alone), and a call that cannot be keyed is compiled as usual."""

import pathlib
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynsys
from dynsys._compile import (
    jit as _jit,
    kept_programs as _kept_programs,
    program_key as _program_key,
)
from dynsys._fitting.chunk import run_chunk

from ..helpers import json_from_child


# A function and a module of a package the key may name (`_NAMED_ROOTS` is widened
# to it); `TRACES` counts how often JAX traced the function.
_HELPER = """
import equinox as eqx
import jax.numpy as jnp

TRACES = []


class Scaled(eqx.Module):
    a: object
    scale: float = eqx.field(static=True)


def program(box, x, n):
    TRACES.append(n)
    y = jnp.cumsum(box.a * x * box.scale + n) / 7.0
    # A LAPACK kernel (a custom call on the CPU): a loaded program must find it.
    s = jnp.linalg.svd(jnp.outer(y, x[:3]), compute_uv=False)
    return {"y": y, "n": n, "box": Scaled(s[:2], box.scale + 1)}
"""

# One process's call of the helper's function as a kept program in `folder`.
_RUN = """
import json, pathlib, sys
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from dynsys._compile import jit as _jit, kept_programs as _kept_programs
from dynsys._compile import program_key as _program_key
import kept_helper

folder = pathlib.Path(sys.argv[1])
_kept_programs._folder = lambda: folder
_program_key._NAMED_ROOTS = _program_key._NAMED_ROOTS | {"kept_helper"}
program = _kept_programs.KeptProgram(kept_helper.program, {})
if sys.argv[2:] == ["filter_jit"]:
    import equinox as eqx
    program = eqx.filter_jit(kept_helper.program)
box = kept_helper.Scaled(np.linspace(0.0, 1.0, 5), 3.0)
out = program(box, np.arange(5.0), 2)
print(json.dumps({
    "traces": len(kept_helper.TRACES),
    "y": [float(v).hex() for v in out["y"]],
    "n": out["n"],
    "box": [float(v).hex() for v in out["box"].a],
    "scale": out["box"].scale,
}))
"""


# Loading a kept program is tested where dynsys keeps programs: the jaxlib it was
# tested with, on the CPU (`_compile/jit.py`, `_keeps_programs`).
_keeps = pytest.mark.skipif(
    not _jit._keeps_programs(), reason="dynsys keeps no programs with this jaxlib"
)


def _run(
    tmp_path: pathlib.Path, folder: pathlib.Path, *mode: str, code: str = _RUN
) -> dict:
    (tmp_path / "kept_helper.py").write_text(_HELPER)
    return json_from_child(code, folder, *mode, cwd=tmp_path)


@_keeps
@pytest.mark.slow
def test_a_new_process_loads_the_kept_program_without_tracing(tmp_path):
    # The second process lowers nothing before it loads the program (whose SVD
    # crashed a process that had not initialised jaxlib's LAPACK kernels).
    folder = tmp_path / "programs"
    first = _run(tmp_path, folder)
    assert first["traces"] == 1 and len(list(folder.iterdir())) == 1
    second = _run(tmp_path, folder)
    assert second["traces"] == 0
    assert second == {**first, "traces": 0}
    # The same program compiled by `equinox.filter_jit`: the same bits.
    reference = _run(tmp_path, tmp_path / "unused", "filter_jit")
    assert reference == first
    assert not (tmp_path / "unused").exists()


@_keeps
@pytest.mark.slow
def test_a_program_compiled_while_jaxs_cache_holds_it_is_kept_whole(tmp_path):
    # jaxlib 0.10 serialises an executable read back from JAX's own cache without
    # its kernels; the kept program must still run in a later process.
    jax_cache = tmp_path / "jax-cache"
    folder = jax_cache / "programs"
    code = _RUN.replace(
        "folder = pathlib.Path",
        "import dynsys\n"
        "dynsys.use_compile_cache(sys.argv[1] + '/..')\n"
        "folder = pathlib.Path",
    )

    def run() -> dict:
        return _run(tmp_path, folder, code=code)

    first = run()
    for entry in folder.iterdir():
        entry.unlink()
    again = run()  # compiled again; JAX's cache must not have answered it
    loaded = run()
    assert (first["traces"], again["traces"], loaded["traces"]) == (1, 1, 0)
    assert first == again == {**loaded, "traces": 1}


def _linear(n: int, dtype=np.float64):
    return dynsys.LinearSystem(
        K=np.eye(n, dtype=dtype) * 0.5,
        B=np.ones((n, 1), dtype),
        C=np.ones((1, n), dtype),
    )


def _key(*args, fun=run_chunk.fun, options=None):
    leaves, treedef = jax.tree.flatten((args, {}))
    dynamic = [eqx.is_array(leaf) for leaf in leaves]
    return _program_key.program_key(fun, options or {}, treedef, leaves, dynamic)


def test_a_key_follows_what_tracing_depends_on():
    base = _key(_linear(3), 2, "a")
    assert _key(_linear(3), 2, "a") == base  # built again: the same key
    assert _key(_linear(4), 2, "a") != base  # shapes
    assert _key(_linear(3, np.float32), 2, "a") != base  # dtypes
    assert _key(_linear(3), 3, "a") != base  # a static value
    assert _key(_linear(3), 2.0, "a") != base  # its type
    assert _key(_linear(3), 2, "a", options={"x": 1}) != base  # compiler options
    assert _key(_linear(3), 2, "a", fun=dynsys.fit) != base  # the function
    with_d = dynsys.LinearSystem(
        K=np.eye(3) * 0.5, B=np.ones((3, 1)), C=np.ones((1, 3)), D=np.ones((1, 1))
    )
    assert _key(with_d, 2, "a") != base  # the tree's structure
    # The array's values are not part of it: they are the program's inputs.
    other = _linear(3)
    other = eqx.tree_at(lambda m: m.K, other, other.K * 0.5)
    assert _key(other, 2, "a") == base
    # The code is part of it: every source file of the package, not only of the
    # folder that computes the key.
    assert _program_key.PACKAGE == pathlib.Path(dynsys.__file__).resolve().parent


# This module's package, for the tests that let the key name its functions.
_ROOT = __name__.split(".")[0]


class _UsersModule(eqx.Module):
    a: jax.Array


def _users_function(x):
    return x


class _Flag(int):
    def __add__(self, other):
        return 0


def test_what_has_no_lasting_name_cannot_be_keyed():
    scale = 2.0
    unkeyable = [
        lambda x: x,  # no module-level name
        lambda x: x * scale,  # a closure
        _users_function,  # not dynsys's, nor a library's in the key
        np.array([object()]),
        _Flag(1),  # a subclass of a plain scalar, with behaviour of its own
    ]
    for value in unkeyable:
        with pytest.raises(_program_key.Unkeyed):
            _program_key.describe(value)
    with pytest.raises(_program_key.Unkeyed):
        _key(_UsersModule(jnp.ones(2)))  # a user's class in the tree

    def traced(x):
        with pytest.raises(_program_key.Unkeyed):
            _program_key.describe_array(x)
        return x

    jax.jit(traced)(jnp.ones(2))


def test_an_unkeyed_call_and_no_folder_compile_as_usual(tmp_path, monkeypatch):
    monkeypatch.setattr(_kept_programs, "_folder", lambda: tmp_path / "programs")

    def twice(fn, x):
        return fn(x) * 2

    program = _kept_programs.KeptProgram(twice, {})
    assert float(program(lambda x: x + 1, jnp.array(1.0))) == 4.0
    assert not (tmp_path / "programs").exists()  # `twice` is the test's: unkeyed
    monkeypatch.setattr(_kept_programs, "_folder", lambda: None)
    assert float(program(lambda x: x + 2, jnp.array(1.0))) == 6.0


def test_a_folder_that_cannot_be_written_is_said_once(tmp_path, monkeypatch):
    (tmp_path / "programs").write_text("a file where the folder would be")
    monkeypatch.setattr(_kept_programs, "_folder", lambda: tmp_path / "programs")
    monkeypatch.setattr(_kept_programs, "_said", set())
    monkeypatch.setattr(
        _program_key, "_NAMED_ROOTS", _program_key._NAMED_ROOTS | {_ROOT}
    )
    program = _kept_programs.KeptProgram(_users_function, {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert float(program(jnp.array(3.0))) == 3.0
        assert float(program(jnp.array(4.0))) == 4.0
        assert float(program(jnp.ones(2))[1]) == 1.0  # another key, same folder
    said = [w for w in caught if "compiled programs are not kept" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]


def test_an_entry_that_loads_but_cannot_run_is_compiled_again(tmp_path, monkeypatch):
    folder = tmp_path / "programs"
    monkeypatch.setattr(_kept_programs, "_folder", lambda: folder)
    monkeypatch.setattr(
        _program_key, "_NAMED_ROOTS", _program_key._NAMED_ROOTS | {_ROOT}
    )

    class Broken:
        def __call__(self, arrays):
            raise jax.errors.JaxRuntimeError("NOT_FOUND: Function x_kernel not found")

    monkeypatch.setattr(_kept_programs, "load", lambda path, key: Broken())
    program = _kept_programs.KeptProgram(_users_function, {})
    assert float(program(jnp.array(5.0))) == 5.0
    assert len(list(folder.glob("*.program"))) == 1  # written over


def _checked_double(x):
    return eqx.error_if(x, x > 100.0, "too big") * 2.0


def test_a_program_that_calls_back_into_python_is_not_kept(tmp_path, monkeypatch):
    # It would hold the address of a Python object of this process.
    folder = tmp_path / "programs"
    monkeypatch.setattr(_kept_programs, "_folder", lambda: folder)
    monkeypatch.setattr(
        _program_key, "_NAMED_ROOTS", _program_key._NAMED_ROOTS | {_ROOT}
    )
    program = _kept_programs.KeptProgram(_checked_double, {})
    assert float(program(jnp.array(3.0))) == 6.0
    assert not list(folder.glob("*.program"))
    with pytest.raises(Exception, match="too big"):
        program(jnp.array(300.0))
    kept = _kept_programs.KeptProgram(_users_function, {})
    assert float(kept(jnp.array(3.0))) == 3.0
    assert len(list(folder.glob("*.program"))) == 1  # the check itself can keep
