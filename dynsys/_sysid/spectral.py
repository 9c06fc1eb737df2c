"""A non-parametric reference from the data: the frequency response estimated by
Welch's method (averaged windowed periodograms) from the cross-spectral matrix, with
its coherence."""

import dataclasses

import numpy as np

from .._fitting.host_blas import on_one_blas_thread
from .._type_checks import checks_own_arguments
from .signals import signals


_WINDOWS = ("hann", "hamming", "boxcar")


@dataclasses.dataclass(frozen=True)
class SpectralEstimate:
    """What `spectral_estimate` returns (float64 / complex128 numpy arrays).

    **Fields:**

    - `w`: `(F,)`, frequencies as `frequency_response` takes them: rad/s when the
        data have a sample time, else rad per sample (`0 ... pi`).
    - `response`: complex `(F, p, m)`, the estimated frequency response
        $\\hat H = \\Phi_{yu} \\Phi_{uu}^{-1}$ (the H1 estimate).
    - `coherence`: `(F, p)`, the multiple coherence of each output with all
        inputs, $\\gamma^2_i = (\\hat H \\Phi_{uu} \\hat H^H)_{ii} / \\Phi_{y_i y_i}$
        in $[0, 1]$ (with one input, the ordinary magnitude-squared coherence):
        near 1 where the output is explained linearly by the inputs, near 0 where
        noise dominates and the estimate is not to be trusted.
    - `input_spectrum`: `(F, m, m)`, $\\Phi_{uu}[f, j, k] = E[U_j \\bar U_k]$.
    - `cross_spectrum`: `(F, p, m)`, $\\Phi_{yu}[f, i, j] = E[Y_i \\bar U_j]$
        (`scipy.signal.csd(u_j, y_i)`).
    - `output_spectrum`: `(F, p)`, the power spectral density of each output.
    - `nperseg`, `num_segments`: the segment length and how many were averaged.
    """

    w: np.ndarray
    response: np.ndarray
    coherence: np.ndarray
    input_spectrum: np.ndarray
    cross_spectrum: np.ndarray
    output_spectrum: np.ndarray
    nperseg: int
    num_segments: int


def _window(window, nperseg: int) -> np.ndarray:
    """The periodic window of length `nperseg` (as `scipy.signal.get_window`)."""
    if isinstance(window, str):
        phase = 2.0 * np.pi * np.arange(nperseg) / nperseg
        if window == "hann":
            return 0.5 - 0.5 * np.cos(phase)
        if window == "hamming":
            return 0.54 - 0.46 * np.cos(phase)
        if window == "boxcar":
            return np.ones(nperseg)
        raise ValueError(
            f"spectral_estimate(window=...): expected one of {_WINDOWS} or an array "
            f"of shape (nperseg,), got {window!r}."
        )
    array = np.asarray(window, np.float64)
    if array.shape != (nperseg,):
        raise ValueError(
            f"spectral_estimate(window=...): an array window must have shape "
            f"(nperseg,) = ({nperseg},), got {array.shape}."
        )
    return array


def default_nperseg(length: int) -> int:
    """The power of two nearest `length / 8`, between 32 and 1024, at most
    `length`: about 15 half-overlapping segments per record."""
    target = max(length / 8.0, 1.0)
    return int(min(length, min(1024, max(32, 2 ** round(np.log2(target))))))


def _segments(signal: np.ndarray, nperseg: int, window: np.ndarray) -> np.ndarray:
    """The windowed, mean-removed FFTs of the half-overlapping segments of
    `signal (L, c)`: `(S, F, c)`."""
    step = nperseg - nperseg // 2
    starts = np.arange(0, signal.shape[0] - nperseg + 1, step)
    pieces = signal[starts[:, None] + np.arange(nperseg)]  # (S, nperseg, c)
    pieces = pieces - pieces.mean(axis=1, keepdims=True)
    return np.fft.rfft(pieces * window[None, :, None], axis=1)


def _check_nperseg(nperseg, longest: int) -> int:
    if nperseg is None:
        return default_nperseg(longest)
    if isinstance(nperseg, bool) or not isinstance(nperseg, int) or nperseg < 2:
        raise ValueError(
            f"spectral_estimate(nperseg=...): expected an int >= 2, got {nperseg!r}."
        )
    if nperseg > longest:
        raise ValueError(
            f"spectral_estimate(nperseg=...): nperseg = {nperseg} is longer than the "
            f"longest experiment ({longest} steps)."
        )
    return nperseg


def _density_scale(nperseg: int, window: np.ndarray, fs: float) -> np.ndarray:
    """One-sided power spectral density scaling of each rfft bin."""
    scale = np.full(nperseg // 2 + 1, 2.0 / (fs * np.sum(window**2)))
    scale[0] /= 2.0
    if nperseg % 2 == 0:
        scale[-1] /= 2.0
    return scale


@on_one_blas_thread
@checks_own_arguments
def spectral_estimate(data, *, nperseg=None, window="hann") -> SpectralEstimate:
    """The frequency response of the data, estimated without a model by Welch's
    method: each experiment is cut into half-overlapping segments of `nperseg`
    steps, each segment's mean removed and `window` applied; the averaged
    cross-spectral matrices give $\\hat H = \\Phi_{yu} \\Phi_{uu}^{-1}$ (several
    inputs need inputs that are not fully correlated) and the coherence.

    Its spectra equal `scipy.signal.csd(u, y, fs, window, nperseg)` (defaults:
    half overlap, constant detrend, density scaling). Its variance falls as
    $1/S$ for $S$ segments: with `nperseg` fixed the error falls as the square
    root of the record length. The two lowest bins (`w[0]`, and `w[1]` with a
    tapered window) are biased by each segment's mean removal: compare from
    `w[2]` on.

    **Arguments:**

    - `data`: a `Dataset` with inputs and outputs (or states); experiments
        shorter than `nperseg` are left out.
    - `nperseg`: the segment length (`None`: the power of two nearest a
        eighth of the longest experiment, between 32 and 1024).
    - `window`: `"hann"`, `"hamming"`, `"boxcar"` or an array `(nperseg,)`.

    **Returns:**

    A `SpectralEstimate` (`w`, `response` `(F, p, m)`, `coherence` `(F, p)`).

    **Raises:**

    `ValueError` for data without inputs, a bad `nperseg` or `window`.

    **Example:**

    ```python
    estimate = dynsys.spectral_estimate(data)
    dynsys.plot.bode([model], w=estimate.w[1:], spectral=estimate)
    ```
    """
    call = "spectral_estimate"
    sig = signals(data, call)
    if sig.us is None:
        raise ValueError(
            f"{call}(data=...): the data have no inputs; a frequency response needs "
            "inputs."
        )
    ys, us = np.asarray(sig.ys, np.float64), np.asarray(sig.us, np.float64)
    nperseg = _check_nperseg(nperseg, max(sig.lengths))
    taper = _window(window, nperseg)
    Y, U = [], []
    for i, length in enumerate(sig.lengths):
        if length >= nperseg:
            Y.append(_segments(ys[i, :length], nperseg, taper))
            U.append(_segments(us[i, :length], nperseg, taper))
    Y, U = np.concatenate(Y), np.concatenate(U)
    fs = 1.0 if sig.dt is None else 1.0 / sig.dt
    scale = _density_scale(nperseg, taper, fs)[:, None, None]
    input_spectrum = scale * np.einsum("sfj,sfk->fjk", U, U.conj()) / len(U)
    cross = scale * np.einsum("sfi,sfj->fij", Y, U.conj()) / len(U)
    output = scale[:, :, 0] * np.mean(np.abs(Y) ** 2, axis=0)
    # A pseudo-inverse: an input with no power at a frequency gives 0 there.
    response = cross @ np.linalg.pinv(input_spectrum, hermitian=True)
    explained = np.einsum("fij,fij->fi", cross, response.conj()).real
    with np.errstate(invalid="ignore", divide="ignore"):
        coherence = np.where(output > 0, explained / output, 0.0)
    w = 2.0 * np.pi * np.fft.rfftfreq(nperseg, 1.0 / fs)
    return SpectralEstimate(
        w,
        response,
        np.clip(coherence, 0.0, 1.0),
        input_spectrum,
        cross,
        output,
        nperseg,
        len(U),
    )
