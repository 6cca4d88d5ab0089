r"""
Your own task function as a resumable Dask sweep
================================================

A sweep runs a task function of yours over ``methods x grid x trials`` on a dask.distributed
cluster, one HDF5 file per task, and merges them into one :class:`xarray.Dataset`. Each task gets
its own seeded generator, so a rerun gives the same numbers, and a rerun of an interrupted sweep
skips the tasks whose files are complete.

The task here: N particles of the 1-D Coulomb gas (:math:`g_{-1}(r) = -|r|`, strength
:math:`\lambda`, exact O(N log N) by sorting, :class:`rieszflow.SortedCoulomb1D`) in the field
:math:`V(x) = x^2/2`, relaxed by projected Langevin dynamics at large :math:`\beta`. Its
equilibrium measure is uniform on :math:`[-\lambda, \lambda]` (the force
:math:`\lambda(2F(x) - 1)` balances :math:`V'(x) = x`), and the task returns the W1 distance of
the particles to it. Two methods compare two step sizes.
"""
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from scipy import stats

import rieszflow as rf

LAM, BETA = 1.0, 2000.0


def gas_task(task, config, rng):
    """One task: relax N particles, return W1 to the uniform law on [-LAM, LAM]."""
    n = dict(task.params)["N"]
    eta = {"eta_small": 2e-3, "eta_large": 5e-3}[task.method]
    H = rf.quadratic_potential(1.0) + rf.SortedCoulomb1D(lam=LAM, normalization="mean_field")
    init, step = rf.projected_langevin(H.grad, rf.Interval(-2.0, 2.0), eta=eta, beta=BETA,
                                       grad_scale=1.0)
    x0 = rng.uniform(-0.5, 0.5, (n, 1))
    state = rf.run_langevin(step, init(x0), config["steps"], seed=rng, progress=False)
    exact = LAM * (2 * (np.arange(n) + 0.5) / n - 1)           # quantiles of the equilibrium law
    w1 = stats.wasserstein_distance(np.asarray(state.omega)[:, 0], exact)
    return xr.Dataset({"w1": ((), w1, {"long_name": "W1(particles, equilibrium law)", "units": "1"})})


if __name__ == "__main__":         # Dask starts its workers by re-importing this script
    out = tempfile.mkdtemp()
    spec = rf.SweepSpec(name="gas", function=gas_task, methods=("eta_small", "eta_large"),
                        grid={"N": (16, 64, 256)}, trials=3, config={"steps": 6000}, root_seed=0)
    rf.run_sweep(spec, out, workers=2, progress=False)
    rf.run_sweep(spec, out, workers=0, progress=False)           # a rerun: every task file is complete
    ds = rf.open_sweep(out)
    w1 = ds["w1"]                                                # dims (method, N, trial)
    print(w1.mean("trial").to_pandas().round(4).to_string())
    for method in spec.methods:
        fit = rf.stats.power_law_fit(w1["N"].values, w1.sel({"method": method}).mean("trial").values)
        print(f"{method}: W1 ~ N^{fit.slope:.2f} +- {fit.slope_se:.2f}")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for method in spec.methods:
        m = w1.sel({"method": method})
        ax.errorbar(m["N"], m.mean("trial"), yerr=m.std("trial"), marker="o", capsize=3, label=method)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N")
    ax.set_ylabel("W1 to the equilibrium law")
    ax.legend()
    fig.tight_layout()
    plt.show()
