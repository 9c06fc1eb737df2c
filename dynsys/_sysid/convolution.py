"""The response of a linear model to inputs before each step, summed by FFT.

A free run or the input regressors of a linear model are sums over past inputs,
$\\sum_{j<t} C K^{t-1-j} (\\cdot)\\,u_j$. Run step by step in NumPy, each of the
`T` steps costs a few small products: about 5 ms per model on a 600-sample
record, and an order scan scores tens of models. As one convolution per
experiment and channel pair, by FFT, the same sums take a fraction of that.

FFT sums carry a rounding error relative to the largest term of the whole
record, not to the terms at each step: exact to float64's last digits while the
model's response decays (`decays`), but where it grows the early steps would
lose their digits; such models keep the recursion, each step to its own digits
(`recursion_states`, in blocks of about $\\sqrt T$ steps).
"""

import math

import numpy as np


DECAYING_RADIUS = 0.999  # below this spectral radius the FFT sums are used


def decays(K: np.ndarray) -> bool:
    """Whether powers of `K (n, n)` decay (spectral radius below
    `DECAYING_RADIUS`), so that its FFT sums keep every step's digits."""
    if K.shape[0] == 0:
        return True
    if not np.all(np.isfinite(K)):
        return False
    return float(np.max(np.abs(np.linalg.eigvals(K)))) < DECAYING_RADIUS


def powers(K: np.ndarray, C: np.ndarray, T: int) -> np.ndarray:
    """$C K^t$ for $t = 0 \\dots T-1$, shape `(T, p, n)`.

    By doubling: the rows so far, times $K^m$ for the `m` of them, give the next
    `m` (`log2 T` batched products instead of `T` small ones: 4 ms a model on a
    4,200-sample record, which an order scan paid some 60 times)."""
    rows = np.empty((T, *C.shape))
    if T == 0:
        return rows
    rows[0] = C
    filled, step = 1, K  # step = K^filled
    while filled < T:
        more = min(filled, T - filled)
        np.matmul(rows[:more], step, out=rows[filled : filled + more])
        filled += more
        if filled < T:
            step = step @ step
    return rows


def recursion_states(A: np.ndarray, forcing: np.ndarray) -> np.ndarray:
    """$x_0 \\dots x_{T-1}$, `(N, T, n)`, of $x_{t+1} = A x_t + f_t$ from $x_0 = 0$
    for `forcing (N, T, n)`: the recursion itself, each step's digits its own (not
    an FFT's), for models whose response grows.

    In blocks of about $\\sqrt T$ steps: every block's states from rest at once
    (`L` steps), the blocks' first states ($x_{(b+1)L} = A^L x_{bL} + $ the block's
    last, `T / L` steps), then $A^j$ times each block's first state added: some
    $3 \\sqrt T$ NumPy operations instead of `T` (on a 534-sample record 70 against
    534). Where the blocks overflow (a model that grows past float64) the plain
    recursion runs instead, so that its inf and nan are the recursion's own."""
    N, T, n = forcing.shape
    size = max(1, math.isqrt(T))
    blocks = -(-T // size)
    padded = np.zeros((N, blocks * size, n))
    padded[:, :T] = forcing
    padded = padded.reshape(N, blocks, size, n)
    local = np.empty((N, blocks, size, n))  # each block's states from rest
    state = np.zeros((N, blocks, n))
    for j in range(size):
        local[:, :, j] = state
        state = state @ A.T + padded[:, :, j]
    to_the = powers(A, np.eye(n), size + 1)  # A^0 ... A^size
    firsts = np.empty((N, blocks, n))  # each block's first state
    first = np.zeros((N, n))
    for b in range(blocks):
        firsts[:, b] = first
        first = first @ to_the[size].T + state[:, b]
    states = local + np.einsum("nbm,jkm->nbjk", firsts, to_the[:size])
    states = states.reshape(N, blocks * size, n)[:, :T]
    if np.all(np.isfinite(states)):
        return states
    return _plain_recursion(A, forcing)


def _plain_recursion(A: np.ndarray, forcing: np.ndarray) -> np.ndarray:
    """`recursion_states` one step at a time."""
    states = np.empty(forcing.shape)
    x = np.zeros((forcing.shape[0], forcing.shape[2]))
    for t in range(forcing.shape[1]):
        states[:, t] = x
        x = x @ A.T + forcing[:, t]
    return states


def smooth_length(n: int) -> int:
    """The smallest `2^a 3^b 5^c` of at least `n` (and 2): a length the FFT
    transforms fast. On a 4,200-sample record 8,640 points against the next power
    of two's 16,384, NumPy's transforms three times faster."""
    best = 1 << max(1, (n - 1).bit_length())
    odd_5 = 1
    while odd_5 < best:
        odd = odd_5
        while odd < best:
            length = odd
            while length < max(n, 2):
                length *= 2
            best = min(best, length)
            odd *= 3
        odd_5 *= 5
    return best


def _delayed(kernel: np.ndarray, signal: np.ndarray, subscripts: str) -> np.ndarray:
    """$\\sum_{j<t}$ `kernel[t-1-j]` combined with `signal[:, j]` by `subscripts`
    (an `einsum` over the frequency axis `f`), shape `(N, T, ...)`: zero at `t = 0`."""
    T = kernel.shape[0]
    length = smooth_length(2 * T - 1)  # no wrap-around
    kernel_f = np.fft.rfft(kernel, n=length, axis=0)
    signal_f = np.fft.rfft(signal, n=length, axis=1)
    summed = np.fft.irfft(np.einsum(subscripts, kernel_f, signal_f), n=length, axis=1)
    out = np.zeros((signal.shape[0], T, *summed.shape[2:]))
    out[:, 1:] = summed[:, : T - 1]
    return out


def delayed_response(kernel: np.ndarray, us: np.ndarray) -> np.ndarray:
    """$y_t = \\sum_{j<t} H_{t-1-j}\\,u_j$ for the Markov parameters
    `kernel (T, p, m)` ($H_t = C K^t B$) and inputs `us (N, T, m)`: `(N, T, p)`."""
    return _delayed(kernel, us, "fpm,nfm->nfp")


def delayed_regressors(kernel: np.ndarray, us: np.ndarray) -> np.ndarray:
    """$\\Phi_t = \\sum_{j<t} R_{t-1-j} \\otimes u_j$ for `kernel (T, a)` and inputs
    `us (N, T, m)`: `(N, T, a, m)` (the derivative of a response
    $\\sum_{j<t} C K^{t-1-j} B u_j$ by the entries of `B`, with `kernel` the rows
    of $C K^t$)."""
    return _delayed(kernel, us, "fa,nfm->nfam")
