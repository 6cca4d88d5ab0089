"""Configuration of ``rieszflow gibbs-check`` (frozen, strict; :meth:`GibbsCheckConfig.quick`).

The physics (beta, lam, s, the ball radius, the alignment objective, the network) comes from
the main-job file being checked; this configuration holds only the check's own sizes.
"""
from __future__ import annotations

import dataclasses

from rieszflow.config import StudyConfig, config_int, config_real

__all__ = ["GibbsCheckConfig"]


@dataclasses.dataclass(frozen=True)
class GibbsCheckConfig(StudyConfig):
    """Sizes of the Gibbs check.

    Parameters
    ----------
    seed : int, default 0
        Seed of the sentence choice and of the samplers' noise.
    n_sentences : int, default 64
        Training sentences (seeded choice) on which each head's one-body potential is built,
        in mini-batches of the run's ``batch_size`` (>= 2).
    n_heldout : int, default 32
        Validation sentences on which the induced attention kernels are compared (>= 2).
    chains : int, default 3
        Independent sampler chains per head (>= 2, for split-R-hat): chain 0 starts at the
        learned particles, chain 1 at the initial ones, chain 2 at the learned ones quenched
        by ``quench_steps`` of projected gradient descent on the potential (from below in
        Hamiltonian, so the chains bracket the Gibbs state), further chains at the learned ones.
    quench_steps : int, default 300
        Projected gradient-descent steps of chain 2's start (>= 0).
    quench_step : float, default 0.01
        Their step size (> 0).
    burn_in : int, default 1000
        Sweeps with step-size adaptation, discarded (>= 1).
    sweeps : int, default 1000
        Kept sweeps with a frozen step (>= 4).
    adapt_every : int, default 1
        Sweeps per adaptation block during burn-in (>= 1); one sweep already holds m proposals.
    eta0 : float, default 1e-2
        Initial proposal step of the component-wise MALA (> 0).
    target_acceptance : float, default 0.574
        Per-particle acceptance the burn-in adapts the step to (in (0, 1)).
    n_saved : int, default 8
        Configurations kept per chain (evenly over the kept sweeps, the last included).
    compute_dtype : {"float32", "float64"}, default "float32"
        Precision of the potential's matrix products in the sampler (see
        :class:`~rieszflow.studies.gibbs_check.potential.HeadPotential`; float32 is twice as fast, its
        error in ``beta V`` is ~1e-4).
    """

    seed: int = 0
    n_sentences: int = 64
    n_heldout: int = 32
    chains: int = 3
    quench_steps: int = 300
    quench_step: float = 0.01
    burn_in: int = 1000
    sweeps: int = 1000
    adapt_every: int = 1
    eta0: float = 1e-2
    target_acceptance: float = 0.574
    n_saved: int = 8
    compute_dtype: str = "float32"

    config_label = "gibbs-check"

    def __post_init__(self):
        config_int("seed", self.seed, minimum=0)
        config_int("n_sentences", self.n_sentences, minimum=2)
        config_int("n_heldout", self.n_heldout, minimum=2)
        config_int("chains", self.chains, minimum=2)
        config_int("burn_in", self.burn_in, minimum=1)
        config_int("sweeps", self.sweeps, minimum=4)
        config_int("adapt_every", self.adapt_every, minimum=1)
        config_int("quench_steps", self.quench_steps, minimum=0)
        config_real("quench_step", self.quench_step, positive=True)
        config_int("n_saved", self.n_saved, minimum=1)
        config_real("eta0", self.eta0, positive=True)
        config_real("target_acceptance", self.target_acceptance, low=0.0, high=1.0, low_open=True,
                    high_open=True)
        if self.compute_dtype not in ("float32", "float64"):
            raise ValueError(f"compute_dtype={self.compute_dtype!r} is not allowed; use 'float32' or "
                             f"'float64'")
        if self.n_saved > self.sweeps:
            raise ValueError(f"n_saved={self.n_saved} must be <= sweeps={self.sweeps}")

    @classmethod
    def quick(cls) -> "GibbsCheckConfig":
        """The ``--quick`` size: fewer sentences and sweeps (a minute or two at full model size).

        Returns
        -------
        GibbsCheckConfig
        """
        return cls(n_sentences=32, n_heldout=16, burn_in=60, sweeps=80, n_saved=4, quench_steps=30)
