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


PACKAGES = ("devalloc", "numba-cuda", "cuda-bindings", "cuda-core", "cupy", "torch", "rmm",
            "numpy")  # fmt: skip
_DISTRIBUTIONS = {"cupy": ("cupy-cuda13x", "cupy-cuda12x"), "rmm": ("rmm-cu13", "rmm-cu12")}


def package_version(name):
    """The installed version of `name` (or of its CUDA-specific wheel), or None."""
    import importlib.metadata

    for distribution in (name, *_DISTRIBUTIONS.get(name, ())):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def environment(command=None):
    """Where a result was measured, for every results file: the GPU and driver
    (from nvidia-smi: CUDA is not started, so a process may still choose its
    memory manager), the CPU, Python, the packages' versions, the date and the
    command (this process's, unless given)."""
    import datetime
    import platform
    import shlex
    import subprocess
    import sys

    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    gpu = driver = None
    if not simulated and shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
        done = subprocess.run(query, capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip():
            gpu, driver = (part.strip() for part in done.stdout.splitlines()[0].split(","))
    cpu = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as info:
            names = [line for line in info if line.startswith("model name")]
        cpu = names[0].split(":", 1)[1].strip() if names else cpu
    versions = {name: package_version(name) for name in PACKAGES}
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "gpu": gpu or "CUDA simulator",
        "driver": driver,
        "cpu": cpu,
        "simulator": simulated,
        "python": platform.python_version(),
        "numba_cuda": versions["numba-cuda"],
        "numpy": versions["numpy"],
        "packages": versions,
        "date": now.date().isoformat(),
        "time": now.isoformat(timespec="seconds"),
        "command": command or shlex.join(["python", *sys.argv]),
    }
