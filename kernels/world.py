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
