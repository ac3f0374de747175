"""Statistics of seed comparisons: the samples' primitives (`stats`), the registered tests and
their decision rules (`decide`: Welch, TOST, Holm, the t-interval, magnitude), power and seeds
needed (`power`), one claim worded as a sentence (`assess`), and the evaluation noise of a gap
(`eval_noise`, a paired bootstrap over held-out windows).
"""
