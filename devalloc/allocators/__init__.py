"""Plugins that give a neighbouring library's device memory a faster source.

numba   ``devalloc.allocators.numba``: Numba's External Memory Management
        plugin. ``NUMBA_CUDA_MEMORY_MANAGER=devalloc.allocators.numba`` makes
        every ``cuda.device_array`` in the process come from a stream-ordered
        (``cudaMallocAsync``) memory pool.
"""
