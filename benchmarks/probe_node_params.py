"""The driver calls a graph per arena slot makes (devalloc.cuda_graphs), alone on
the GPU: a Numba kernel captured into a CUDA graph, its node found with
cuStreamGetCaptureInfo, the graph instantiated twice with the second instance's
first parameter set by `_set_first_parameter` (cuFuncGetParamInfo counts the
parameters, cuGraphExecKernelNodeSetParams sets it), and both instances replayed
with their own values.

    python benchmarks/probe_node_params.py      (on the GPU; prints PROTO OK)

Run 34 ran its first draft, the same calls (an H100, driver 580.159.04,
2026-12-07): 15 parameters of 8 bytes,
instance 0 wrote 1000 + i, instance 1 1001 + i, instance 0 again 1000 + i
(benchmarks/results/h100-2026-12-07-run34-node-params.txt).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from cuda.bindings import driver as cu
from numba import cuda

from devalloc.cuda_graphs import _set_first_parameter, driver_call


@cuda.jit
def write(handle, out, other):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = handle + other[i]


def replay(instance, stream, out):
    driver_call(cu.cuGraphLaunch(instance, stream), "cuGraphLaunch")
    driver_call(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
    return out.copy_to_host()


def main():
    out = cuda.to_device(np.full(64, -7, np.int64))
    other = cuda.to_device(np.arange(64, dtype=np.int64))
    write[1, 64](0, out, other)  # (loaded before the capture)
    cuda.synchronize()
    stream = driver_call(
        cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "create"
    )
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    driver_call(cu.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
    write[1, 64, cuda.external_stream(int(stream))](1000, out, other)
    info = cu.cuStreamGetCaptureInfo(stream)
    print("capture info", info)
    node = info[4][0]
    graph = driver_call(cu.cuStreamEndCapture(stream), "cuStreamEndCapture")
    first = driver_call(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    second = driver_call(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    _set_first_parameter(second, node, 1000, 1001)  # (checks the captured 1000)
    a, b, c = (replay(instance, stream, out) for instance in (first, second, first))
    print(a[:3], b[:3], c[:3])
    expected = np.arange(64)
    assert (a == 1000 + expected).all() and (b == 1001 + expected).all() and (c == a).all()
    print("PROTO OK")


if __name__ == "__main__":
    main()
