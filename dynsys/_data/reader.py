"""Which reader reads a text table: the fast one (pandas' C parser) for a big file
when pandas is installed, else the built-in one. Both give the same `Table`, and
the same errors: the fast reader hands any file it finds a problem in to the
built-in one."""

import pathlib
import sys

from .columns import Plan
from .table import Table
from .text_files import Header, read_text


# Below this size the built-in reader (about 7 MiB/s) is done before pandas is
# imported (0.4-0.6 s): pandas reads a file only from this size, or when something
# in the process already imported it.
FAST_READER_MIN_BYTES = 4 * 2**20


def read_table(path: pathlib.Path, header: Header, plan: Plan) -> Table:
    """The used cells of a text table, read by the fastest reader available."""
    from .fast_csv import read_fast

    table = None
    if "pandas" in sys.modules or path.stat().st_size >= FAST_READER_MIN_BYTES:
        table = read_fast(path, header, plan)
    return read_text(path, header, plan) if table is None else table
