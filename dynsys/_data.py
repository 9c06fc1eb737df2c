"""Kept for imports written before the data layer was split by concept: new code
imports from `_dataset` (the `Dataset` class), `_load_dataset`, `_data_files` (the
file formats) and `_simulate`."""

from ._data_files import write_atomic as _write_atomic
from ._dataset import Dataset as Dataset
from ._load_dataset import load_dataset as load_dataset
from ._simulate import simulate as simulate


__all__ = ["Dataset", "_write_atomic", "load_dataset", "simulate"]
