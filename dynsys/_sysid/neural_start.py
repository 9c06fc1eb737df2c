"""A nonlinear model's initial state on new records: the state its `StateEncoder`
reads off each record's first `encoder.past` samples (`neural_initial_state`, and
`compare(model, data, encoder=...)`)."""

from jaxtyping import Array, Float

from .._type_checks import checks_own_arguments
from .._fitting.encoder import StateEncoder
from .._fitting.windows import encode, free_run_windows
from .signals import kind_of, signals


@checks_own_arguments
def neural_initial_state(encoder: StateEncoder, data) -> Float[Array, "N n"]:
    """The state of each experiment after its first `encoder.past` samples (the
    encoder reads them); shape `(N, n)`. Simulate from there on the data's
    `window(encoder.past, None)`.

    **Raises:**

    `TypeError` when `encoder` is not a `StateEncoder` (a model given in its
    place); `ValueError` when the encoder reads another number of channels than
    the data has, or more samples than its shortest experiment."""
    return encoded_states("neural_initial_state", encoder, data)


def encoded_states(call: str, encoder, data) -> Float[Array, "N n"]:
    """`neural_initial_state` with `call`'s name in its one-line errors."""
    if not isinstance(encoder, StateEncoder):
        raise TypeError(
            f"{call}(encoder=...): expected a StateEncoder (the initial-state "
            f"encoder that fit_neural returns and saves beside its model), got "
            f"{kind_of(encoder)}."
        )
    s = signals(data, call)
    _check_encoder_reads(call, encoder, s)
    if encoder.past >= min(s.lengths):
        raise ValueError(
            f"{call}(data=...): the encoder reads the first past = {encoder.past} "
            "samples and the model runs on the rest, but the shortest experiment "
            f"has {min(s.lengths)} samples."
        )
    batch = free_run_windows(s.ys, s.us, s.lengths, encoder.past)
    return encode(encoder, batch)


def _check_encoder_reads(call: str, encoder: StateEncoder, s) -> None:
    """One-line `ValueError` unless the encoder's features are its `past` samples of
    the data's channels (inputs and outputs)."""
    channels = s.ys.shape[-1] + (0 if s.us is None else s.us.shape[-1])
    features = encoder.feature_mean.shape[-1]
    if encoder.past * channels != features:
        raise ValueError(
            f"{call}(encoder=..., data=...): the encoder reads {features} values, "
            f"which are not its past = {encoder.past} samples of the data's "
            f"{channels} channels (inputs and outputs, {encoder.past * channels} "
            "values): an encoder of other data, or an edited one."
        )
