"""Language-model data: text sources and the source grammar (`corpus`), the byte-level BPE
tokeniser and token files (`tokenizer`), the token cache (`prepared`), the held-out split
(`heldout`), seeded batches (`sampling`), weighted domains (`mixture`), record files as
documents (`tabular`) and the held-out window rule (`windows`).
``python -m lab.data SOURCE`` prepares one source (`__main__`).
"""
