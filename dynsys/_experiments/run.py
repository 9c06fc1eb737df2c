"""`run_experiment`: a validated config run into a run folder, built aside and moved
into place whole.

A run folder holds the resolved `config.toml`, `metrics.json`, `history.csv`, the
model file `model.dynsys`, PNG figures and a short `summary.md` (`single.py`); a sweep
holds one such folder per swept value, with a summary figure and table (`sweep.py`).
The kinds of experiment live in `kinds.py`, the schema in `schema.py`.
"""

import contextvars
import dataclasses
import os
import pathlib
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._atomic_write import with_path
from .._compile.cache import use_compile_cache
from .._fitting.host_blas import on_one_blas_thread
from .paths import resolve_data_file
from .results import ExperimentResult
from .run_folder import (
    check_out,
    clean_stale,
    discard_staging,
    move_staging,
    replace_folder,
    reserve_folder,
    staging_folder,
)
from .runtime.interrupt import catch_interrupts
from .schema import resolve_config
from .single import _run_single
from .sweep import _run_sweep


def _rebase(result: ExperimentResult, old: pathlib.Path, new: pathlib.Path):
    def move(path: pathlib.Path) -> pathlib.Path:
        return new / path.relative_to(old)

    return dataclasses.replace(
        result,
        path=move(result.path),
        figures=tuple(move(p) for p in result.figures),
        runs=tuple(_rebase(r, old, new) for r in result.runs),
    )


def _out_root(out_root: "str | os.PathLike") -> pathlib.Path:
    root = pathlib.Path(out_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        why = error.strerror.lower() if error.strerror else str(error)
        raise ValueError(
            f"run_experiment(out_root=...): cannot create {str(root)!r} ({why})."
        ) from None
    if not os.access(root, os.W_OK):
        raise ValueError(
            f"run_experiment(out_root=...): {str(root)!r} is not writable."
        )
    return root


@on_one_blas_thread
def run_experiment(
    config: "str | os.PathLike | Mapping[str, Any]",
    *,
    out_root: "str | os.PathLike" = "runs",
    out: "str | os.PathLike | None" = None,
    overrides: "Mapping[str, Any] | Sequence[str] | None" = None,
    progress: bool = True,
    echo: Callable[[str], None] | None = print,
) -> ExperimentResult:
    """Run an experiment from a config and write its run folder.

    `kind = "fit"` fits a linear (or stable linear) model to data simulated from a
    zoo model or read from `data.file`; `kind = "train_controller"` trains a
    controller to drive a zoo system to `cost.target`; a `[sweep]` table runs once
    per value into sub-folders. The folder (`out`, or
    `out_root/<name>-<timestamp>/`) is built aside and moved into place whole: a
    failed run leaves nothing behind. Same config and seed, same metrics (except
    `metrics["timing"]`). SIGTERM is handled like SIGINT: training stops and keeps
    its best model, and the folder is marked interrupted. With several processes
    (`dynsys run --distributed`), only process 0 prints and writes; elsewhere the
    result's paths do not exist. The experiments and many-hosts guides say more.

    **Arguments:**

    - `config`: a TOML file's path or the parsed TOML as a dict (see
        `resolve_config` and the experiments guide for every key).
    - `out_root`: where the timestamped run folder is made.
    - `out`: an exact folder to write instead. An earlier run folder there is
        replaced; anything else (a folder dynsys did not write, a file, `.`, `..`)
        is refused before anything runs.
    - `overrides`: config keys to set first, `{"fit.steps": 10}` or
        `["fit.steps=10"]` (as `dynsys run --set`).
    - `progress`: show progress bars.
    - `echo`: where progress lines and tables go (`None`: nowhere).

    **Returns:**

    An `ExperimentResult` (the folder, resolved config, metrics, figures, sub-runs).

    **Raises:**

    `ConfigError` (a `ValueError`) naming the key and what is allowed, for an
    invalid config, an unreadable `data.file`, or values that do not fit the model
    (e.g. a `cost.target` of the wrong length); `ValueError` for an `out` or
    `out_root` that cannot or may not be written; `KeyboardInterrupt` for a signal
    that came before there was anything to keep (nothing is written then).

    **Example:**

    ```python
    result = dynsys.run_experiment(
        {"kind": "fit", "data": {"trajectories": 4, "length": 20},
         "fit": {"steps": 10}},
        out_root="runs", progress=False, echo=None)
    sorted(p.name for p in result.figures)  # eigenvalues, loss, trajectories
    ```
    """
    if _elsewhere():  # several processes: only process 0 writes
        return _run_without_writing(config, overrides)
    resolved = resolve_data_file(resolve_config(config, overrides))
    use_compile_cache(resolved["compile_cache"])
    echo = echo if echo is not None else (lambda line: None)
    out, root = _destination(out, out_root)
    clean_stale(root)
    return _run_into_folder(resolved, out, root, progress, echo)


def _destination(out, out_root) -> tuple[pathlib.Path | None, pathlib.Path]:
    """`(out, root)`: the checked exact folder (or `None`) and the folder the run
    folder goes into, created if needed."""
    if out is None:
        return None, _out_root(out_root)
    out = check_out(out, "run_experiment(out=...)")
    return out, out.absolute().parent


def _run_into_folder(resolved, out, root, progress, echo) -> ExperimentResult:
    """Run `resolved` (one run or a sweep) into a staging folder in the config's
    precision, then move it to `out` or a new `root/<name>-<timestamp>/`; on any
    failure remove both."""
    import jax

    folder = staging = None
    with (
        catch_interrupts() as interrupts,
        jax.enable_x64(resolved["precision"] == "float64"),
    ):
        try:
            folder = out if out is not None else reserve_folder(root, resolved["name"])
            staging = staging_folder(folder)
            if "sweep" in resolved:
                result = _run_sweep(resolved, staging, progress, echo, interrupts)
            else:
                result = _run_single(resolved, staging, progress, echo, interrupts)
            with interrupts.deferred():
                if out is None:  # an empty folder of ours: renaming onto it is atomic
                    move_staging(staging, folder)
                else:
                    replace_folder(staging, folder, "run_experiment(out=...)")
        except BaseException as error:
            if staging is not None:
                discard_staging(staging)
            if out is None and folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            if interrupts.interrupted and not isinstance(error, KeyboardInterrupt):
                # A failure the signal caused (a half-made result): an interrupt.
                raise KeyboardInterrupt(interrupts.name) from error
            if isinstance(error, OSError) and folder is not None:
                named = with_path(error, folder, " while writing the run folder")
                if named is not error:  # a full disk names no file: name the run
                    raise named from error
            raise
    return _rebase(result, staging, folder)


# Several processes (`dynsys run --distributed`): every process runs the experiment
# (the collectives need all of them); process 0 alone prints and writes.
_WITHOUT_WRITING = contextvars.ContextVar("dynsys_without_writing", default=False)


def _elsewhere() -> bool:
    """True in a process other than 0, unless already running without writing."""
    import jax

    return jax.process_index() != 0 and not _WITHOUT_WRITING.get()


def _run_without_writing(config, overrides) -> ExperimentResult:
    """`run_experiment` into a temporary folder that is removed, printing nothing
    (no progress, no warnings)."""
    import tempfile
    import warnings

    token = _WITHOUT_WRITING.set(True)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="dynsys-process-") as scratch,
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            return run_experiment(
                config,
                out=pathlib.Path(scratch) / "run",
                overrides=overrides,
                progress=False,
                echo=None,
            )
    finally:
        _WITHOUT_WRITING.reset(token)
