"""Paper 003 (Kernel Geometry Divergence) study: Table 2 and the d -> infinity asymptotics."""
