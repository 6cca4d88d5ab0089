"""The self-consistent Gibbs density against the long-time histogram of the interacting particles.

Issue acceptance: "the Gibbs fixed point agrees ... with the particle histogram within sampling
error". The particle system is eq. (E.2) with the mean-field scaling lam/N, Euler-Maruyama with
mirror reflection (weak order 1), on the 1-D problem of ``rieszflow mean-field`` (interval):
V = x^2/2 on [-1.25, 1.25], the 1-D Coulomb kernel g = -|w| (s = -1), lam = 1, beta = 10.

Sampling error: R independent replicas, each a time average of the cell-mass histogram over
snapshots taken after a burn-in; the standard error of each cell is the standard deviation across
replicas over sqrt(R). Biases (finite N: O(1/N) = 5e-4 relative; time step: O(eta) = 2e-3
relative; burn-in from the uniform law: e^{-4}) are well below the tolerance of 5 standard
errors (Bonferroni over 25 cells with t_15 tails: false-alarm probability below 1 %).
The same data must reject the non-interacting Gibbs density exp(-beta V)/Z (power check).
"""
import numpy as np

from rieszflow.solvers.gibbs import gibbs_density
from rieszflow.solvers.mckean_vlasov import MeanFieldProblem, interval_mesh
from rieszflow.solvers.particles import (MeanFieldParticles, domain_space, make_interaction, quadratic_potential)

LO, HI, CELLS = -1.25, 1.25, 25
BETA, LAM, S, GAMMA = 10.0, 1.0, -1.0, 1.0


def _gibbs_cell_masses(lam):
    dom = interval_mesh(LO, HI, CELLS)
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * GAMMA * np.sum(x * x, axis=1),
                                   s=S, lam=lam, beta=BETA)
    res = gibbs_density(prob)
    assert res.converged
    return res.rho * dom.volumes


def test_gibbs_density_matches_long_time_particle_histogram():
    p_gibbs = _gibbs_cell_masses(LAM)
    assert abs(p_gibbs.sum() - 1.0) < 1e-10
    system = MeanFieldParticles(space=domain_space((LO,), (HI,)), potential=quadratic_potential(GAMMA),
                                interaction=make_interaction(S, LAM, 1), beta=BETA, eta=2e-3,
                                boundary="reflect")
    n, replicas = 2000, 16
    times = np.round(np.arange(4.0, 9.0 + 1e-9, 0.5), 6)        # burn-in 4, then every 0.5
    edges = np.linspace(LO, HI, CELLS + 1)
    hists = np.empty((replicas, CELLS))
    for r in range(replicas):
        rng = np.random.default_rng([20261122, r])
        snaps = system.simulate(rng.uniform(LO, HI, size=(n, 1)), times, rng)
        hists[r] = np.mean([np.histogram(s[:, 0], edges)[0] / n for s in snaps], axis=0)
    mean = hists.mean(axis=0)
    se = hists.std(axis=0, ddof=1) / np.sqrt(replicas)
    se = np.maximum(se, 1e-4 / np.sqrt(n))          # guard against empty edge cells
    z = (mean - p_gibbs) / se
    assert np.max(np.abs(z)) < 5.0, (np.round(z, 2), mean, p_gibbs)
    assert np.abs(mean - p_gibbs).sum() < 0.02       # L1 between histograms, for scale
    # power: the same data reject the Gibbs density without interaction
    z0 = (mean - _gibbs_cell_masses(0.0)) / se
    assert np.max(np.abs(z0)) > 10.0
