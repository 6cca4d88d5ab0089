r"""
A learned attention kernel read back with xarray
================================================

Paper 000's two phases on a few hundred Rotten Tomatoes sentences (the bundled data, the
``--smoke`` sizes): Phase A moves the random-feature particles Omega of every attention head by
projected Langevin dynamics on the Hamiltonian :math:`H = -V_{seq} + \lambda W_{N,s}`; Phase B freezes them and
trains the rest of the Transformer. The run file is an HDF5 file with named dimensions; xarray
reads the particle trajectory and the Hamiltonian, and the learned kernel
``k(x, y) = phi(x) . phi(y) / m`` is rebuilt from the final particles and compared with the initial one.
"""
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

import rieszflow as rf
from rieszflow.learning import SMOKE_OVERRIDES

out = Path(tempfile.mkdtemp()) / "smoke.h5"
cfg = rf.MainJobConfig().replace(**SMOKE_OVERRIDES, seed=0)
metrics = rf.run_main_job(cfg, out, quiet=True)
print(f"test accuracy {metrics['accuracy']:.3f} after {cfg.phase_a_epochs} Phase A and "
      f"{cfg.epochs} Phase B epoch(s)")

ds = xr.open_dataset(out, engine="h5netcdf")
print(dict(ds["omega"].sizes))                              # time, layer, head, particle, coord
H = ds["hamiltonian"]
print(f"Hamiltonian over {H.sizes['step']} Phase A steps: {float(H[0]):.4f} -> {float(H[-1]):.4f} "
      f"({H.attrs['long_name']}, {H.attrs['units']})")
norms = np.linalg.norm(ds["omega"].isel(layer=0, head=0).values, axis=-1)   # (time, particle)
print(f"mean particle norm of layer 0, head 0: {norms[0].mean():.4f} -> {norms[-1].mean():.4f}")

name, omega, options = rf.load_learned_kernel(out, layer=0, head=0)
omega0 = ds["omega"].isel(time=0, layer=0, head=0).values
fmap = rf.make_feature_map(name, omega.shape[1], omega.shape[0], **options)
x = np.random.default_rng(0).standard_normal((64, omega.shape[1])) / np.sqrt(omega.shape[1])
K1 = fmap.forward(x, omega)[0] @ fmap.forward(x, omega)[0].T / omega.shape[0]
K0 = fmap.forward(x, omega0)[0] @ fmap.forward(x, omega0)[0].T / omega.shape[0]
print(f"{name} kernel on 64 random tokens: relative change by learning "
      f"{np.linalg.norm(K1 - K0) / np.linalg.norm(K0):.4f}")

fig, (l, r) = plt.subplots(1, 2, figsize=(9, 3.5))
H.plot(ax=l)
l.set_title("Phase A: the Hamiltonian")
im = r.imshow(K1 - K0, cmap="RdBu_r")
r.set_title("learned minus initial kernel, 64 tokens")
fig.colorbar(im, ax=r)
fig.tight_layout()
plt.show()
ds.close()
