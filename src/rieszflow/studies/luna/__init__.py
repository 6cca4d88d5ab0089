"""Paper 001 (LUNA): learnable feature maps for linear attention; ``rieszflow luna``."""
