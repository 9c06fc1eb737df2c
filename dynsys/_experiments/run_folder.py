"""Run folders: where a run is built (a hidden staging folder), how it is moved into
place, which existing folders dynsys may replace, and the cleaning of what a killed
process left behind.

Every folder dynsys writes holds a marker file `.dynsys-run`. An `out` folder is
replaced only when it holds that marker (or is empty); anything else, a regular file,
`.`, `..` or a parent of the working folder, is refused before anything runs.

Run folders may live on a file system shared by several hosts (NFS, Slurm array
jobs) or containers (one volume, separate PID namespaces), where a pid means nothing
outside its own machine and namespace. So a staging folder's name carries the host and
boot id besides the pid (`.<name>.partial-<host>~<boot>~<pid>`), it holds an owner
file with the full identity, and the run holds an exclusive `flock` on a lock file in
it for its whole life. A stale folder is removed only when it is provably this
host's (same host name and boot id in its owner file), its pid is gone, and its lock
is free; anything else (another host's, an older dynsys's, a live one) is left alone.
"""

import errno
import fcntl
import json
import os
import pathlib
import shutil
import socket
import time


MARKER = ".dynsys-run"
_STAGING = ".partial-"
_OLD = ".old-"
_LOCK = ".dynsys-lock"
_OWNER = ".dynsys-owner"
# The lock file descriptors of this process's staging folders (closing one frees
# its lock), by the folder's path.
_HELD: dict[str, int] = {}


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


def _host() -> str:
    return socket.gethostname()


def _boot_id() -> str:
    """This boot of the kernel (`""` where unreadable): a pid is only meaningful
    within one boot, and containers on one host share it."""
    try:
        return pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _identity() -> dict:
    return {"host": _host(), "boot_id": _boot_id(), "pid": os.getpid()}


def _tag(identity: dict) -> str:
    """`<host>~<boot>~<pid>` for a folder name (host made safe and at most 24
    characters; the owner file holds the full identity)."""
    host = "".join(c if c.isalnum() or c == "-" else "_" for c in identity["host"])
    boot = identity["boot_id"].replace("-", "")[:8] or "noboot"
    return f"{host[:24] or 'nohost'}~{boot}~{identity['pid']}"


def _parse_tag(tag: str) -> int | None:
    """The pid of a `<host>~<boot>~<pid>` tag (`None` for anything else, such as
    the bare pid of a dynsys from before host tags)."""
    parts = tag.split("~")
    if len(parts) == 3 and parts[2].isdigit():
        return int(parts[2])
    return None


def _write_owner(folder: pathlib.Path) -> None:
    (folder / _OWNER).write_text(json.dumps(_identity()) + "\n")


def staging_folder(folder: pathlib.Path) -> pathlib.Path:
    """Create the hidden folder a run is built in, beside `folder`, and lock it for
    this process's life (or until `replace_folder`/`move_staging`/`discard_staging`).

    The lock file and the owner file (host, boot id, pid) are written before the
    marker, so a folder with the marker is always one `clean_stale` can judge.
    """
    staging = folder.with_name(f".{folder.name}{_STAGING}{_tag(_identity())}")
    if staging.exists():  # this very process's (same host, boot and pid)
        discard_staging(staging)
    staging.mkdir()
    try:
        descriptor = os.open(staging / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _HELD[str(staging)] = descriptor
        _write_owner(staging)
        write_marker(staging, "a run folder")
    except BaseException:  # a full disk, say: leave nothing half-made behind
        discard_staging(staging)
        raise
    return staging


def _release(staging: pathlib.Path) -> None:
    descriptor = _HELD.pop(str(staging), None)
    if descriptor is not None:
        os.close(descriptor)


def _unlock_files(staging: pathlib.Path) -> None:
    """Drop the lock and owner files before the folder becomes a run folder (while
    they are missing, `clean_stale` leaves the folder alone: it is not provable)."""
    for name in (_OWNER, _LOCK):
        try:
            (staging / name).unlink()
        except FileNotFoundError:
            pass


def move_staging(staging: pathlib.Path, folder: pathlib.Path) -> None:
    """Rename the finished `staging` onto `folder` (an empty folder this run
    reserved: atomic) and free its lock."""
    _unlock_files(staging)
    os.replace(staging, folder)
    _release(staging)


def discard_staging(staging: pathlib.Path) -> None:
    """Remove a failed run's `staging` folder and free its lock."""
    shutil.rmtree(staging, ignore_errors=True)
    _release(staging)


def replace_folder(staging: pathlib.Path, out: pathlib.Path, call: str) -> None:
    """Move the finished `staging` folder to `out`, replacing an earlier run there
    (checked again: `out` may have changed while the run was going)."""
    check_out(out, call)
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}{_OLD}{_tag(_identity())}")
        os.replace(out, old)
        _write_owner(old)  # so that, were this process killed now, it is provable
    _unlock_files(staging)
    os.replace(staging, out)
    _release(staging)
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


def _owner_is_gone(entry: pathlib.Path, pid: int) -> bool:
    """Whether `entry` provably belongs to a finished process of this host and
    boot: its owner file names this host and boot id and `pid`, which is gone."""
    try:
        owner = json.loads((entry / _OWNER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(owner, dict):
        return False
    here = _identity()
    return (
        owner.get("host") == here["host"]
        and owner.get("boot_id") == here["boot_id"]
        and owner.get("pid") == pid
        and pid != here["pid"]
        and not _pid_alive(pid)
    )


def _try_lock(entry: pathlib.Path) -> "int | None | bool":
    """Take the lock of `entry`: the held descriptor, `None` when it has no lock
    file (nothing holds it), or `False` when another process holds it."""
    try:
        descriptor = os.open(entry / _LOCK, os.O_RDWR)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return False
    return descriptor


def _stale_candidate(entry: pathlib.Path) -> tuple[str, str, int] | None:
    """`(stem, tag, pid)` of a hidden staging or moved-aside folder name."""
    name = entry.name
    if not name.startswith("."):
        return None
    for tag in (_STAGING, _OLD):
        stem, sep, rest = name[1:].rpartition(tag)
        pid = _parse_tag(rest) if sep and stem else None
        if pid is not None:
            return stem, tag, pid
    return None


def clean_stale(parent: pathlib.Path) -> list[pathlib.Path]:
    """Remove what killed dynsys processes of this host left in `parent`: hidden
    staging (`.<name>.partial-<host>~<boot>~<pid>`) and moved-aside
    (`.<name>.old-<host>~<boot>~<pid>`) folders, and the empty `<name>` folder a
    killed run had reserved.

    A folder is removed only when it holds the dynsys marker and an owner file that
    names this host and boot id and a pid that is gone, and its lock is free (held
    by us while removing it). Another host's or container's run, a live run, and the
    folders of a dynsys from before host tags are left alone. Returns what was
    removed.
    """
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        candidate = _stale_candidate(entry)
        if candidate is None or entry.is_symlink() or not entry.is_dir():
            continue
        stem, tag, pid = candidate
        if not (entry / MARKER).is_file() or not _owner_is_gone(entry, pid):
            continue
        lock = _try_lock(entry)
        if lock is False:
            continue  # a live run (in another PID namespace, say) holds it
        try:
            shutil.rmtree(entry, ignore_errors=True)
        finally:
            if lock is not None:
                os.close(lock)
        removed.append(entry)
        reserved = parent / stem
        if tag == _STAGING and reserved.is_dir() and not reserved.is_symlink():
            try:
                reserved.rmdir()  # only if empty: a reserved, never-filled folder
                removed.append(reserved)
            except OSError:
                pass
    return removed
