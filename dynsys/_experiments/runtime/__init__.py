"""The process plumbing of a run: the figure helper process and its worker script,
signal handling, the supervisor of a distributed run, the stage clock and the
garbage collector's freeze. Nothing here knows a kind of experiment."""
