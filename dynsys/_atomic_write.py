"""Writing a file whole or not at all (`write_atomic`), and an `OSError` that names
the file it was about (`with_path`): used by the data files, the model files, the
run folders and the compiled programs dynsys keeps (`_compile/kept_programs.py`).
Not compile machinery: a shared module below every layer that writes files."""

import os
import pathlib
import tempfile


def with_path(error: OSError, path, doing: str = "") -> OSError:
    """`error` naming `path` when it names no file of its own (a full disk, `ENOSPC`,
    is raised by `write` with no file name); otherwise `error` itself."""
    if error.filename is not None or error.errno is None:
        return error
    return type(error)(error.errno, f"{error.strerror}{doing}", str(path))


def write_atomic(path: pathlib.Path, content: bytes) -> None:
    """Write `content` to a temporary file next to `path`, then rename it over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        # mkstemp creates the file 0600; give it the usual umask-based mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        with os.fdopen(handle, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        if os.path.exists(temporary):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise with_path(error, path) from None
        raise
