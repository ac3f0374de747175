"""The language model: the decoder (`model`: `FibLM`, `ModelConfig`, presets), its typed config
layer read back from JSON (`config`), and sampling text from it (`generate`).
"""
