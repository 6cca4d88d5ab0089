"""``rieszflow gibbs-check``: a main-job file's learned particles against the Gibbs state of their
(linearised) Phase A Hamiltonian (:mod:`.potential`, :mod:`.study`, :mod:`.cli`)."""
