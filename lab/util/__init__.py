"""Helpers every layer uses: strict JSON (`jsonio`), where runs and the store live (`paths`),
counted nouns and durations in messages (`wording`), progress bars (`progress`).
"""
