"""Choose Numba's CUDA target or its simulator. Call before numba is imported."""

import os
import shutil


def simulate_without_gpu():
    """Use the CUDA simulator when this machine has no NVIDIA GPU, unless
    NUMBA_ENABLE_CUDASIM says otherwise. Returns whether it simulates."""
    if "NUMBA_ENABLE_CUDASIM" not in os.environ:
        has_gpu = shutil.which("nvidia-smi") is not None and (
            os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/dxg")  # Linux, WSL
        )
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if has_gpu else "1"
    return os.environ["NUMBA_ENABLE_CUDASIM"] == "1"


def environment(gpu):
    """Where a result was measured: the GPU (or the simulator), versions, date
    and the command, for the examples' results files."""
    import datetime
    import platform
    import sys

    import numba_cuda
    import numpy as np
    from numba import cuda

    device = cuda.get_current_device().name if gpu else "CUDA simulator"
    return {
        "gpu": device.decode() if isinstance(device, bytes) else device,
        "numba_cuda": numba_cuda.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
        "command": " ".join(sys.argv),
    }
