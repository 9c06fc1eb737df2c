"""Run folders: where a run is built (a hidden staging folder), how it is moved into
place, which existing folders dynsys may replace, and the cleaning of what a killed
process left behind.

Every folder dynsys writes holds a marker file `.dynsys-run`. An `out` folder is
replaced only when it holds that marker (or is empty); anything else, a regular file,
`.`, `..` or a parent of the working folder, is refused before anything runs.
"""

import errno
import os
import pathlib
import shutil
import time


MARKER = ".dynsys-run"
_STAGING = ".partial-"
_OLD = ".old-"


def write_marker(folder: pathlib.Path, what: str) -> None:
    """Mark `folder` as written by dynsys (so a later `out=` may replace it)."""
    (folder / MARKER).write_text(
        f"written by dynsys ({what}); dynsys may replace this folder.\n"
    )


def check_out(out: "str | os.PathLike", call: str) -> pathlib.Path:
    """Check that dynsys may write the run folder `out`, before anything runs.

    `out` may be missing, an empty folder, or a folder dynsys wrote (it holds the
    marker, or, from an older dynsys, only the files of a run). `call` names the
    caller in the error (e.g. `run_experiment(out=...)`).

    **Raises:**

    `ValueError` (one line) for anything else: a folder of other files, a regular
    file, a symbolic link, `.`, `..`, the working folder or one of its parents, a
    path below a regular file, or a parent folder that cannot be created.
    """
    text = os.fspath(out)
    path = pathlib.Path(text)

    def fail(why: str) -> ValueError:
        return ValueError(f"{call}: {text!r} {why}")

    if not text or path.name in ("", ".", ".."):
        return _raise(fail("is not a folder name dynsys can create and replace."))
    if len(path.name) > 200:
        return _raise(
            fail(f"has a last component of {len(path.name)} characters (at most 200).")
        )
    try:
        resolved = path.resolve()
        cwd = pathlib.Path.cwd().resolve()
    except (OSError, RuntimeError) as error:
        return _raise(fail(f"cannot be resolved ({_reason(error)})."))
    if cwd == resolved or resolved in cwd.parents:
        return _raise(fail("is the working folder or one of its parents."))
    if path.is_symlink():
        return _raise(
            fail(
                "is a symbolic link; dynsys replaces only a run folder it wrote. "
                "Give another folder."
            )
        )
    if path.exists():
        if not path.is_dir():
            return _raise(
                fail("is an existing file; dynsys replaces only a run folder it wrote.")
            )
        if (
            not (path / MARKER).is_file()
            and any(path.iterdir())
            and not _older_run_folder(path)
        ):
            return _raise(
                fail(
                    f"is a folder that dynsys did not write (it has no {MARKER} "
                    "marker); refusing to replace it. Give a new folder, or remove "
                    "this one yourself."
                )
            )
    for parent in path.absolute().parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                return _raise(fail(f"is below {str(parent)!r}, which is not a folder."))
            break
    try:
        path.absolute().parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return _raise(fail(f"cannot be created ({_reason(error)})."))
    if not os.access(path.absolute().parent, os.W_OK):
        return _raise(fail("cannot be created (its parent folder is not writable)."))
    return path


# What a run folder of dynsys 0.1 (written before the marker) holds.
_OLDER_RUN_FILES = {
    "config.toml",
    "metrics.json",
    "history.csv",
    "model.dynsys",
    "summary.md",
    "data.npz",
    "summary.json",
    "trajectory.npz",
}


def _older_run_folder(path: pathlib.Path) -> bool:
    """A run folder written by a dynsys from before the marker: only the files a run
    writes (and its PNG figures), with its metrics. Nothing else would be lost."""
    entries = list(path.iterdir())
    names = {entry.name for entry in entries}
    if not all(
        entry.is_file()
        and not entry.is_symlink()
        and (entry.name in _OLDER_RUN_FILES or entry.name.endswith(".png"))
        for entry in entries
    ):
        return False
    return {"config.toml", "metrics.json"} <= names or {
        "summary.json",
        "trajectory.npz",
    } <= names


def _raise(error: ValueError):
    raise error


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error)


def reserve_folder(root: pathlib.Path, name: str) -> pathlib.Path:
    """Create (so no other run can take it) an empty `root/<name>-<timestamp>`."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    k = 1
    while True:
        folder = root / (f"{name}-{stamp}" + (f"-{k}" if k > 1 else ""))
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            k += 1


def staging_folder(folder: pathlib.Path) -> pathlib.Path:
    """Create the hidden folder a run is built in, beside `folder`, with the marker."""
    staging = folder.with_name(f".{folder.name}{_STAGING}{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    write_marker(staging, "a run folder")
    return staging


def replace_folder(staging: pathlib.Path, out: pathlib.Path, call: str) -> None:
    """Move the finished `staging` folder to `out`, replacing an earlier run there
    (checked again: `out` may have changed while the run was going)."""
    check_out(out, call)
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}{_OLD}{os.getpid()}")
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError as error:
        return error.errno != errno.ESRCH
    return True


def clean_stale(parent: pathlib.Path) -> list[pathlib.Path]:
    """Remove what killed dynsys processes left in `parent`: hidden staging
    (`.<name>.partial-<pid>`) and moved-aside (`.<name>.old-<pid>`) folders whose
    process is gone, and the empty `<name>` folder a killed run had reserved.

    Only hidden folders holding the dynsys marker are removed (and the reserved
    folder beside one, if empty); returns what was removed.
    """
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not name.startswith("."):
            continue
        for tag in (_STAGING, _OLD):
            stem, sep, pid = name[1:].rpartition(tag)
            if sep and pid.isdigit() and stem:
                break
        else:
            continue
        if _pid_alive(int(pid)) or entry.is_symlink() or not entry.is_dir():
            continue
        if not (entry / MARKER).is_file():
            continue  # not ours (or killed before its first write): left alone
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
        reserved = parent / stem
        if tag == _STAGING and reserved.is_dir() and not reserved.is_symlink():
            try:
                reserved.rmdir()  # only if empty: a reserved, never-filled folder
                removed.append(reserved)
            except OSError:
                pass
    return removed
