"""devalloc on Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``): the twins of
the GPU's modules, module for module, picked by `devalloc.backend`.

device_memory   simulated device memory (registered numpy buffers) and the
                allocator's memory accesses over it
warp            exact stand-ins for the warp primitives
numba_arena     the Arena a simulated kernel sees (a Python object)
launch          wrapper kernels compiled and launched: lanes registered, one
                kernel at a time
host_memory     SimMemory, an arena's bytes
cuda_graphs     a Graph's recording: launches as calls, made at each replay
"""
