"""The main job of paper 000 (App. F.2): Phase A particle learning, Phase B classifier training."""
