r"""
Large deviations of a Gibbs law
===============================

Under the particle Gibbs law :math:`P_N \propto e^{-\beta N \mathcal H_N}` the empirical measure
:math:`\mu_N` satisfies a large-deviation principle with speed N and rate function
:math:`I(\mu) = \beta[\mathcal F_\beta(\mu) - \inf\mathcal F_\beta]` (paper 000, Thm 2, eq. (4.6)):
:math:`P(\mu_N \in A) \approx e^{-N\inf_A I}`. For the deviation set
:math:`A = \{\mu : \int x\,d\mu \ge a\}` (the particles' mean pushed to the right) the infimum is
attained by a tilted Gibbs density, :math:`\rho \propto e^{-\beta(V + \lambda g*\rho) + \theta x}`,
which :func:`rieszflow.rate_infimum` finds by root finding on the multiplier :math:`\theta`.
Near the typical mean the rate is quadratic, :math:`(a - m)^2 / (2\sigma^2)`, with
:math:`\sigma^2` the variance of :math:`\sqrt N(\int x\,d\mu_N - m)`. The pair forces cancel in
the sum, so a translation-invariant interaction hardly changes that variance: it stays close to
that of independent particles in :math:`V` (:math:`1/(\beta V'') = 0.25` on the whole line); the
script prints both.
"""
import matplotlib.pyplot as plt
import numpy as np

import rieszflow as rf

mesh = rf.interval_mesh(-2.0, 2.0, 200)
x, h = mesh.centers[:, 0], mesh.volumes
problem = rf.MeanFieldProblem.create(mesh, 0.5 * x**2, interaction=rf.Interaction(s=-1.0, lam=1.0),
                                     beta=4.0)
gibbs = rf.gibbs_density(problem)
print(f"typical mean of the Gibbs density {np.sum(x * gibbs.rho * h):+.2e}; "
      f"I(Gibbs) = {rf.rate_function(problem, gibbs.rho, reference=gibbs):.2e}")

levels = np.array([0.05, 0.1, 0.2, 0.3, 0.4, 0.5])
rates, tilted = [], []
for a in levels:
    res = rf.rate_infimum(problem, x, a)
    assert res.converged, f"rate_infimum did not converge at a = {a}"
    rates.append(res.value)
    tilted.append(res.rho)
    check = rf.rate_function(problem, res.rho, reference=gibbs)
    print(f"a = {a:.2f}: inf_A I = {res.value:.5f} (theta = {res.theta:.3f}, "
          f"mean of the minimiser {res.constraint:.4f}; I at the minimiser {check:.5f})")
rates = np.array(rates)
var_iid = np.sum(x**2 * np.exp(-4.0 * 0.5 * x**2) * h) / np.sum(np.exp(-4.0 * 0.5 * x**2) * h)
sigma2 = levels[0] ** 2 / (2 * rates[0])
print(f"small-deviation variance sigma^2 = {sigma2:.4f}; without interaction "
      f"(independent particles in V) it would be {var_iid:.4f}")

fig, (l, r) = plt.subplots(1, 2, figsize=(9, 3.5))
l.plot(levels, rates, "o-", label="inf_A I (rate_infimum)")
l.plot(levels, levels**2 / (2 * sigma2), "k--", label="quadratic, from the first point")
l.set_xlabel("a")
l.set_ylabel("rate")
l.legend()
r.plot(x, gibbs.rho, "k", label="Gibbs density")
for a, rho in zip(levels[::2], tilted[::2]):
    r.plot(x, rho, label=f"minimiser, a = {a:g}")
r.set_xlabel("x")
r.legend(fontsize=8)
fig.tight_layout()
plt.show()
