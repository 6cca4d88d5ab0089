r"""
A Coulomb gas in a ball against its equilibrium measure
=======================================================

N particles in :math:`\mathbb R^3` repel each other by the Coulomb kernel :math:`g(r) = 1/r` (the
Riesz s-energy with s = d - 2 = 1) and are held by the field :math:`V(x) = |x|^2 / 2`. The
mean-field Hamiltonian

.. math::

    H_N(x) = \sum_i V(x_i) + \frac{\lambda}{2N}\sum_{i \ne j} \frac{1}{|x_i - x_j|}

has as :math:`N \to \infty` and :math:`\beta \to \infty` the equilibrium measure: uniform on the
ball of radius :math:`R = \lambda^{1/3}` (Frostman: :math:`\Delta V = 3 = 4\pi\lambda\rho` on the
support), whose radial law is :math:`P(|x| \le r) = (r / R)^3`. Projected Langevin dynamics at large inverse temperature beta, in a
confining ball larger than the support, should reproduce it up to O(1/sqrt(N)) sampling error and
an O(1/beta) thermal edge.
"""
import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

import rieszflow as rf

N, lam, beta, eta, steps = 300, 2.0, 2000.0, 2e-3, 3000
R = lam ** (1 / 3)                                          # radius of the equilibrium support

space = rf.Ball(1.5 * R)                                    # the domain; the gas stays inside R
H = rf.quadratic_potential(1.0) + rf.RieszEnergy(s=1.0, lam=lam, normalization="mean_field")
init, step = rf.projected_langevin(H.grad, space, eta=eta, beta=beta, grad_scale=1.0)

rng = np.random.default_rng(0)
state = init(space.sample_uniform(rng, N, 3))
state = rf.run_langevin(step, state, steps, seed=1, progress=False)

radii = np.linalg.norm(state.omega, axis=1)
exact = R * ((np.arange(N) + 0.5) / N) ** (1 / 3)           # quantiles of P(|x| <= r) = (r/R)^3
w1 = stats.wasserstein_distance(radii, exact)
print(f"N = {N}, lam = {lam}, beta = {beta}: support radius R = {R:.4f}")
print(f"largest particle radius {radii.max():.4f}, mean radius {radii.mean():.4f} "
      f"(equilibrium 3R/4 = {0.75 * R:.4f})")
print(f"W1(radial law of the particles, radial law of the equilibrium measure) = {w1:.4f}")
print(f"Hamiltonian per particle H_N / N = {float(H(state.omega)) / N:.4f}; continuum energy of the "
      f"equilibrium measure 0.3 R^2 + 0.6 lam / R = {0.3 * R**2 + 0.6 * lam / R:.4f}")

fig, ax = plt.subplots(figsize=(5, 3.5))
ax.hist(radii, bins=25, density=True, alpha=0.6, label=f"{N} particles")
r = np.linspace(0, R, 200)
ax.plot(r, 3 * r**2 / R**3, "k", label="equilibrium measure, 3 r^2 / R^3")
ax.set_xlabel("radius |x|")
ax.set_ylabel("density")
ax.legend()
fig.tight_layout()
plt.show()
