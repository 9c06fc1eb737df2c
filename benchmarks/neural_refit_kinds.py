"""The final neural refit (issue 46) on simulated plants of other kinds than the
cascaded tanks' record: a linear plant with measurement noise (the neural part has
nothing to learn) and a tank whose last third stays inside the range of the rest.
Each: 900 samples, the first 600 train and the last 300 stop early (`first`), then
`refit` trains on all 900 for 1.5 times its best step (at least 50); both scored on
a separate 600-sample test record (RMS, output units).

    python benchmarks/neural_refit_kinds.py linear|tank
"""
import sys
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
import dynsys

def linear(T, seed):
    rng = np.random.default_rng(seed)
    u = np.repeat(rng.standard_normal(T // 5 + 1), 5)[:T, None]
    x = np.zeros(2); y = []
    K = np.array([[0.9, 0.2], [-0.2, 0.8]]); B = np.array([1.0, 0.5]); C = np.array([1.0, 0.0])
    for t in range(T):
        y.append(C @ x + 0.05 * rng.standard_normal()); x = K @ x + B * u[t, 0]
    return u, np.array(y)[:, None]

def tank(T, seed):
    rng = np.random.default_rng(seed)
    u = np.repeat(rng.uniform(0.5, 2.0, T // 10 + 1), 10)[:T, None]
    h, y = 1.0, []
    for f in u[:, 0]:
        y.append(h + 0.01 * rng.standard_normal()); h = max(h + 0.2 * (f - np.sqrt(h)), 0.0)
    return u, np.array(y)[:, None]

kind = {"linear": linear, "tank": tank}[sys.argv[1]]
u, y = kind(900, 0); ut, yt = kind(600, 1)
D = lambda a, b: dynsys.Dataset(us=u[None, a:b], ys=y[None, a:b])
E, test = D(0, 900), dynsys.Dataset(us=ut[None], ys=yt[None])
train, val = D(0, 600), D(600, 900)
def rms(r):
    c = r.compare(test); return float(np.sqrt(np.mean((np.asarray(c.measured) - np.asarray(c.predicted)) ** 2)))
first = dynsys.fit_neural(train, val, key=jax.random.key(0), horizon=32)
steps = max(50, round(first.best_step * 1.5))
refit = dynsys.fit_neural(E, E, key=jax.random.key(0), horizon=32, num_steps=steps, patience=10**6)
print(f"{sys.argv[1]}: first best step {first.best_step}, test RMS {rms(first):.4g}; "
      f"refit {steps} steps: test RMS {rms(refit):.4g}")
