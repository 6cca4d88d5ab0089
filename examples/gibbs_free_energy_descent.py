r"""
The Gibbs density and the free energy's descent
================================================

On the interval :math:`[-2, 2]` a density :math:`\rho` feels the double-well field
:math:`V(x) = x^4/4 - x^2/2` and the 1-D Coulomb repulsion :math:`g_{-1}(r) = -|r|` with strength
:math:`\lambda`, at inverse temperature :math:`\beta`. Its free energy

.. math::

    \mathcal F_\beta(\rho) = \int V\rho + \frac{\lambda}{2}\iint g_{-1}(x-y)\rho(x)\rho(y)
    + \beta^{-1}\int \rho\log\rho

is a Lyapunov function of the reflected McKean-Vlasov equation
:math:`\partial_t\rho = \nabla\cdot(\rho\nabla(V + \lambda g * \rho)) + \beta^{-1}\Delta\rho`
(no-flux boundary), whose stationary state is the self-consistent Gibbs density
:math:`\rho = e^{-\beta(V + \lambda g * \rho)}/Z` (paper 000, eq. (4.4)-(4.5)). The script solves
the fixed point with :func:`rieszflow.gibbs_density`, integrates the PDE from a lopsided start with
:func:`rieszflow.solve_mckean_vlasov`, and plots the free energy's gap to its minimum.
"""
import matplotlib.pyplot as plt
import numpy as np

import rieszflow as rf

mesh = rf.interval_mesh(-2.0, 2.0, 200)
problem = rf.MeanFieldProblem.create(mesh, lambda x: x[:, 0] ** 4 / 4 - x[:, 0] ** 2 / 2,
                                     interaction=rf.Interaction(s=-1.0, lam=0.5), beta=4.0)
gibbs = rf.gibbs_density(problem)
print(f"Gibbs density: {gibbs.iterations} fixed-point iterations, free energy {gibbs.free_energy:.6f}")

x, h = mesh.centers[:, 0], mesh.volumes                 # cell centres and widths
rho0 = np.exp(-((x - 1.0) ** 2) / 0.1)                    # all the mass near the right well
rho0 /= (rho0 * h).sum()
run = rf.solve_mckean_vlasov(problem, rho0, t_end=20.0, dt=1e-3, dt_max=0.2, dt_growth=1.1,
                             save_times=[0.5, 2.0, 20.0])
gap = run.free_energy - gibbs.free_energy
print(f"{run.step_time.size - 1} implicit steps; F(t) - F(Gibbs): "
      + ", ".join(f"{g:.2e} at t = {t:.2f}" for t, g in zip(run.step_time[[0, 10, 40, -1]],
                                                            gap[[0, 10, 40, -1]])))
print(f"F never increases: largest step increase {max(0.0, np.diff(run.free_energy).max()):.2e}; "
      f"L1(rho(20), Gibbs) = {(np.abs(run.rho[-1] - gibbs.rho) * h).sum():.2e}")

fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
for t, r in zip(run.times, run.rho):
    a.plot(x, r, label=f"PDE, t = {t:g}")
a.plot(x, gibbs.rho, "k--", label="Gibbs density")
a.set_xlabel("x")
a.set_ylabel("density")
a.legend(fontsize=8)
b.semilogy(run.step_time, np.maximum(gap, 1e-14))
b.set_xlabel("t")
b.set_ylabel("F(rho_t) - F(Gibbs)")
fig.tight_layout()
plt.show()
