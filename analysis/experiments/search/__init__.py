"""The schedule search: the Optuna driver (`search`), what a trial optimises (`objectives`), the
search spaces without Optuna (`space`) and the winners re-run beside the paper's (`report`).
"""
