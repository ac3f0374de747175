"""Sparse attention ops: `attention.sparse_attention` (one function, four exact paths over the
ladder's columns) and the probes' annealed blur gather (`blur`), on top of `lab.kernels`.
"""
