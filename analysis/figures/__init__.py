"""Figures: the lab's one plotting style (`style`), the paper's figures from tables (`plots`), and
learned-α trajectories read from the store or probe records (`trajectories`).
"""
