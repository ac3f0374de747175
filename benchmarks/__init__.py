"""Benchmark scripts (run each as `python benchmarks/NAME.py`); a package so that
`benchmarks.gpu` resolves to this checkout ahead of any installed `benchmarks`."""
