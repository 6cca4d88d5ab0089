"""rieszflow.engine: particles, energies, integrators, feature maps, the Transformer, storage.

Source: paper 000 (random features as interacting particles), sections 2-4 and
appendices B-D; paper 004 (attention as interacting particles).
"""
