"""Systems: what steps. `AbstractSystem` and `LinearSystem` (`system.py`), the
stable parameterisation, continuous-time ODEs, controllers and layered modules.
Imports nothing of dynsys but `_custom_types`."""
