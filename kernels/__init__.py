"""Ready-made kernels built on devalloc, used by examples/ and benchmarks/.

Not installed with the library: import them from a checkout (the repository
root on ``sys.path``), as the examples, benchmarks and tests do.
"""
