"""Evaluation: held-out perplexity, length extrapolation and position-resolved loss of a model
(`evaluate`; the kind of an evaluation row is the store's, `lab.store.evalkind`), a trained
run's evaluations end to end, logged to the store (`evalrun`), and the held-out loss over a
grid of α (`landscape`).
"""
