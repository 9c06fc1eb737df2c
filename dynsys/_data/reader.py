"""Which reader reads a text table: the fast one (pandas' C parser) when pandas is
installed, else the built-in one. Both give the same `Table`, and the same errors:
the fast reader hands any file it finds a problem in to the built-in one."""

import pathlib

from .columns import Plan
from .table import Table
from .text_files import Header, read_text


def read_table(path: pathlib.Path, header: Header, plan: Plan) -> Table:
    """The used cells of a text table, read by the fastest reader available."""
    from .fast_csv import read_fast

    table = read_fast(path, header, plan)
    return read_text(path, header, plan) if table is None else table
