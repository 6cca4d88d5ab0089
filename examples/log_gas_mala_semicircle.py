r"""
The log gas sampled by MALA against the semicircle law
======================================================

N particles on the line with the logarithmic interaction (the Riesz kernel at s = 0,
:math:`g_0(r) = -\log r`) in the field :math:`V(x) = x^2/2`, with the mean-field Hamiltonian

.. math::

    H_N(x) = \sum_i V(x_i) + \frac{\lambda}{2N}\sum_{i \ne j} -\log|x_i - x_j| .

As N grows the empirical measure of the Gibbs law :math:`\propto e^{-\beta H_N}` concentrates on
the minimiser of :math:`\int V\,d\mu + \frac{\lambda}{2}\iint -\log|x-y|\,d\mu\,d\mu`: the
semicircle law on :math:`[-R, R]`, :math:`R = \sqrt{2\lambda}` (its Hilbert transform is
:math:`2x/R^2`, which balances :math:`V'(x) = x`). The Metropolis-adjusted Langevin algorithm
(:func:`rieszflow.mala`) samples the Gibbs law exactly, with no discretisation bias; at
:math:`\beta = 200` the thermal broadening of the edge is small.
"""
import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

import rieszflow as rf

N, lam, beta, eta = 100, 1.0, 200.0, 3e-4
R = np.sqrt(2 * lam)                                      # edge of the semicircle

H = rf.quadratic_potential(1.0) + rf.RieszEnergy(s=0.0, lam=lam, normalization="mean_field")
init, step = rf.mala(H.value_and_grad, rf.Free(), eta=eta, beta=beta, grad_scale=1.0)

rng = np.random.default_rng(0)
x0 = R / 2 * stats.norm.ppf((np.arange(N) + 0.5) / N)[:, None]   # spread out, the semicircle's variance
state = init(x0)
state = rf.run_langevin(step, state, 5000, seed=rng, progress=False, stall_steps=None)   # burn-in
samples = []                                              # every 500th configuration after it
state = rf.run_langevin(step, state, 20000, seed=rng, record_every=500, record_initial=False,
                        callback=lambda s: samples.append(np.array(s.omega[:, 0])), progress=False,
                        stall_steps=None)
x = np.concatenate(samples)
print(f"N = {N}, beta = {beta}: {len(samples)} recorded configurations, "
      f"acceptance rate {float(state.n_accepted) / state.step:.3f}")

# W1 between the pooled particles and the semicircle law (its quantiles by inverting the CDF)
u = (np.arange(x.size) + 0.5) / x.size
grid = np.linspace(-R, R, 20001)
cdf = 0.5 + (grid * np.sqrt(R**2 - grid**2) + R**2 * np.arcsin(grid / R)) / (np.pi * R**2)
w1 = stats.wasserstein_distance(x, np.interp(u, cdf, grid))
print(f"W1(particles, semicircle of radius {R:.4f}) = {w1:.4f}; "
      f"largest |x| = {np.abs(x).max():.4f}")

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.hist(x, bins=60, density=True, alpha=0.6, label=f"MALA, N = {N}")
ax.plot(grid, 2 / (np.pi * R**2) * np.sqrt(R**2 - grid**2), "k", label="semicircle law")
ax.set_xlabel("x")
ax.set_ylabel("density")
ax.legend()
fig.tight_layout()
plt.show()
