"""Figures: the lab's one plotting style and panel helpers (`style`), the paper's figures from
tables (`plots`), the attended sets themselves (`structure`), and learned-α trajectories read
from the store or probe records (`trajectories`).
"""
