"""The claims ledger: every claim of analysis/reference/claims.toml decided once (`ledger`) on the
strongest evidence (`evidence`: tiers of runs, probe cells, timings), by checks of LM claims
(`checks`, `compare`, `across`), probe claims (`probe`), efficiency (`efficiency`) and the claims
the lab computes exactly (`exact`); shown in reports (`report`), and the README's sentences kept
to its verdicts (`verdict_words`).
"""
