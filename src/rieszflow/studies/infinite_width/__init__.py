"""``rieszflow infinite-width``: paper 002 (infinite-width limit of one attention layer) as sweeps."""
