r"""
Learning random-feature frequencies by projected Langevin dynamics
==================================================================

Random Fourier features :math:`\phi_k(x) = \cos(\omega_k\cdot x + b_k)` define the kernel
:math:`k_N(x, y) = \frac1N\sum_k \phi_k(x)\phi_k(y)`. Paper 000 treats the frequencies
:math:`\omega_k` as interacting particles: they follow projected Langevin dynamics on the
Hamiltonian :math:`H_N = \mathcal E_N + \lambda\mathcal W_{N,s}`, minus the kernel-target
alignment of the data (eq. (2.2), phase-averaged, (B.8)) plus a Riesz repulsion that keeps them
apart. Here the data are two interleaved half-moons with labels :math:`\pm 1`. The trajectory is
written by :class:`rieszflow.TrajectoryWriter` into an HDF5 file with named dimensions and read back
with xarray (:func:`rieszflow.open_run`): the Hamiltonian along the steps and the particles before
and after.
"""
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_moons

import rieszflow as rf

X, labels = make_moons(200, noise=0.1, random_state=0)
y = 2.0 * labels - 1.0
N, lam, eta, beta, steps = 64, 1e-2, 2e-3, 1e4, 400

align = rf.RFFAlignmentEnergy(X, y)
H = align + rf.RieszEnergy(s=0.0, lam=lam)
space = rf.Ball(6.0)
init, step = rf.projected_langevin(H.grad, space, eta=eta, beta=beta)
omega0 = np.random.default_rng(0).standard_normal((N, 2))

path = Path(tempfile.mkdtemp()) / "rff_moons.h5"
with rf.TrajectoryWriter(path, "rff_langevin", config=dict(N=N, lam=lam, eta=eta, beta=beta),
                         attrs={"seed": 0}) as w:
    w.dimension("step", None, dtype="i8", attrs={"long_name": "Langevin step", "units": "1"})
    w.dimension("particle", N, coords=np.arange(N), attrs={"long_name": "particle", "units": "1"})
    w.dimension("coord", 2, coords=np.arange(2), attrs={"long_name": "coordinate", "units": "1"})
    w.variable("omega", ("step", "particle", "coord"),
               attrs={"long_name": "RFF frequencies", "units": "1 / input unit"})
    w.variable("alignment", ("step",), attrs={"long_name": "alignment energy E_N", "units": "1"})
    w.variable("hamiltonian", ("step",), attrs={"long_name": "H_N = E_N + lam W_N,s", "units": "1"})

    def record(state):
        w.append("step", {"omega": state.omega, "alignment": float(align(state.omega)),
                          "hamiltonian": float(H(state.omega))}, coord=state.step)

    rf.run_langevin(step, init(omega0), steps, seed=1, record_every=10, callback=record,
                    progress=False, stall_steps=None)

ds = rf.open_run(path)
print(dict(ds.sizes), list(ds.data_vars), ds.attrs["status"])
a = ds["alignment"]
print(f"alignment energy {float(a[0]):.4f} -> {float(a[-1]):.4f} over {int(ds.step[-1])} steps")
norms = np.hypot(ds.omega.sel(coord=0), ds.omega.sel(coord=1))
print(f"mean |omega| {float(norms.isel(step=0).mean()):.3f} -> {float(norms.isel(step=-1).mean()):.3f}")

fig, (l, r) = plt.subplots(1, 2, figsize=(9, 3.6))
ds["hamiltonian"].plot(ax=l, label="H_N")
a.plot(ax=l, label="E_N (alignment)")
l.legend()
r.scatter(*ds.omega.isel(step=0).values.T, s=10, alpha=0.4, label="initial")
r.scatter(*ds.omega.isel(step=-1).values.T, s=10, color="C3", label="learned")
r.set_xlabel("omega_1")
r.set_ylabel("omega_2")
r.set_aspect("equal")
r.legend()
fig.tight_layout()
plt.show()
ds.close()
