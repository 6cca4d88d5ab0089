"""rieszflow: particle and mean-field simulation engine for learned attention kernels.

The package has three layers, imported in one direction only
(``studies -> solvers -> engine``):

``rieszflow.engine``
    backend (NumPy/CuPy), spaces, energies, integrators, feature maps, the bundled
    Transformer, empirical measures, HDF5 storage.
``rieszflow.solvers``
    the reflected McKean-Vlasov PDE (FiPy), Gibbs equilibria and rate functions.
``rieszflow.studies``
    the main job and every study, one ``rieszflow`` subcommand each.

Source: "Random features as interacting particles" (paper 000 of this project) and
the companion papers cited in ``docs/``.
"""
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("rieszflow")
except _metadata.PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
