"""The attended set: the paper's rule.  Which keys a query reads — the Fibonacci (or power-of-2)
ladder of offsets scaled by a layer's α, beside the local window (`offsets`), decided once per
layer as integer or interpolated columns (`plan`); the per-layer α schedules (`schedules`), the
named schemes of the paper's run matrix (`schemes`), and how far a learned α moved (`drift`).
Pure functions and small records; no model code.
"""
