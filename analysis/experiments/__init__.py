"""The experiments that train models, above the tables and the ledger they feed: the main job
(`demo`), the CPU study that decides the headline LM claims (`study`), and the schedule search
(`search`).
"""
