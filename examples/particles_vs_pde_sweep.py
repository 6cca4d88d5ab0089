r"""
Particles against the McKean-Vlasov PDE: W1 against N on a Dask sweep
=====================================================================

N particles on [-2, 2] feel the field :math:`V(x) = x^2 / 2`, repel each other by the 1-D Coulomb
kernel :math:`g(r) = -|r|` (Riesz s = -1) with strength :math:`\lambda / N`, and diffuse at inverse
temperature :math:`\beta`
(paper 000, eq. (E.2)); reflected at the walls. As N grows their empirical measure at time T
approaches the solution rho(T) of the reflected McKean-Vlasov PDE with a no-flux boundary
(eq. (4.4)-(4.5)). Each (N, trial) is one task of a sweep: a task function written here, run on
a dask.distributed LocalCluster, one HDF5 file per task; rerunning the script skips the complete
tasks. The merged dataset has dimensions (method, N, trial).
"""
import sys
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

import rieszflow as rf

LO, HI, LAM, BETA, T, ETA = -2.0, 2.0, 1.0, 10.0, 0.5, 2e-3
RHO0 = dict(mean=(0.8,), std=(0.3,), lo=(LO,), hi=(HI,))


def pde_at_T(n_cells=400):
    """Cell masses of the PDE at time T on a uniform grid, and the W1 metric of that grid."""
    mesh = rf.interval_mesh(LO, HI, n_cells)
    inter = rf.Interaction(s=-1.0, lam=LAM)
    problem = rf.MeanFieldProblem.create(mesh, lambda x: 0.5 * x[:, 0] ** 2, interaction=inter, beta=BETA)
    rho0 = rf.TruncatedGaussian(**RHO0).cell_density(mesh)
    result = rf.solve_mckean_vlasov(problem, rho0, t_end=T, dt=1e-3, save_times=[T])
    w1 = rf.GridW1(mesh, tol=0.0)
    return w1.masses(mesh, result.rho[-1]), w1


def w1_task(task, config, rng):
    """One sweep task: N particles to time T, W1 of their empirical measure to the PDE's rho(T)."""
    n = dict(task.params)["N"]
    masses, w1 = pde_at_T()
    system = rf.MeanFieldParticles(
        space=rf.Interval(LO, HI), potential=rf.quadratic_potential(1.0),
        interaction=rf.make_interaction(d=1, interaction=rf.Interaction(s=-1.0, lam=LAM)),
        beta=BETA, eta=ETA, boundary="reflect")
    x = system.simulate(rf.TruncatedGaussian(**RHO0).sample(rng, n), [0.0, T], rng)[-1]
    return xr.Dataset({"w1": ((), w1.particles(x, masses),
                              {"long_name": "W1(particles at T, PDE rho(T))", "units": "1"})})


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
    spec = rf.SweepSpec(name="w1_vs_N", function=w1_task, methods=("euler",),
                        grid={"N": (25, 100, 400)}, trials=4, root_seed=0)
    rf.run_sweep(spec, out, workers=2, progress=False)
    ds = rf.open_sweep(out)
    w1 = ds["w1"].sel({"method": "euler"})            # (a dimension named "method": pass a dict)
    print(w1.mean("trial").to_series().to_string())
    fit = rf.stats.power_law_fit(w1["N"].values, w1.mean("trial").values)
    print(f"W1 ~ N^{fit.slope:.2f} +- {fit.slope_se:.2f} (sampling rate N^-0.5 for i.i.d. points)")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.errorbar(w1["N"], w1.mean("trial"), yerr=w1.std("trial"), marker="o", capsize=3,
                label="particles against the PDE")
    ax.plot(w1["N"], w1.mean("trial")[0] * (w1["N"] / w1["N"][0]) ** -0.5, "k--", label="N^-1/2")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N")
    ax.set_ylabel("W1 at time T")
    ax.legend()
    fig.tight_layout()
    plt.show()
