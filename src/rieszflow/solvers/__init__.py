"""rieszflow.solvers: the reflected McKean-Vlasov PDE (FiPy), Gibbs equilibria and rate functions.

Source: paper 000, Thm 1 / Thm 4 (eq. 4.4-4.5, E.3-E.5) and Thm 2 / Thm 6 (eq. 4.6-4.7).
"""
