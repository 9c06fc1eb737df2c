"""The rollout engine: one `lax.scan` (or associative scan, or chunked powers of `K`)
that records a trajectory, its methods, the hand-written adjoints, and the sharding
of batches over devices. Imports only `_systems`."""
