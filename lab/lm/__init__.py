"""The language model: the decoder (`model`: `FibLM`, its layers, `build_model`), its
configuration and presets (`modelconfig`: `ModelConfig`, `config_for`), the typed override and
JSON layer every config dataclass is read through (`typedconfig`), and sampling text (`generate`).
"""
