"""Integration: Dask (``distributed``). Each worker owns its arena, made once when
the worker starts and closed when it stops::

    from devalloc.dask import ArenaPlugin, worker_arena

    client.register_plugin(ArenaPlugin(256 << 20))  # on every worker, now and later

    def process(frame):                              # a task
        arena = worker_arena()                       # this worker's arena
        return arena.run(run_kernels, arena, frame)  # one frame, the arena sized to it

    results = client.gather(client.map(process, frames))

An overflow in a task raises `ArenaOverflowError` there, and Dask hands it to
the client as the task's exception, attributes and all (devalloc's errors
pickle whole). With ``dask-cuda``'s ``LocalCUDACluster`` (a worker per GPU,
each seeing its GPU as device 0) every GPU gets its own arena; what spreads
frames over GPUs and machines is Dask's, devalloc only keeps each worker's
memory. Give GPU workers one thread each (dask-cuda's default): a frame belongs
to the thread that opened it, so a worker's threads would take turns anyway.
"""

import asyncio

from distributed import WorkerPlugin, get_worker

from .arena import Arena, checked_arena_options
from .errors import DevallocError

__all__ = ["ArenaPlugin", "worker_arena"]

PLUGIN_NAME = "devalloc-arena"


class ArenaPlugin(WorkerPlugin):
    """A worker plugin that gives each Dask worker an `Arena(nbytes, **options)`.

    Register it with ``client.register_plugin(ArenaPlugin(nbytes))``; tasks get
    their worker's arena from `worker_arena`.
    """

    name = PLUGIN_NAME

    def __init__(self, nbytes, **options):
        # Checked here, on the client, not first on every worker.
        self.nbytes, _ = checked_arena_options(nbytes, **options)
        self.options = options
        self.arena = None  # made on the worker, never on the client

    def setup(self, worker):
        self.arena = Arena(self.nbytes, **self.options)

    async def teardown(self, worker):
        # close() waits for a task's open frame: off the worker's event loop, which
        # would otherwise stop (heartbeats included) until the task is done.
        arena, self.arena = self.arena, None
        if arena is not None:
            await asyncio.to_thread(arena.close)


def worker_arena():
    """The arena of the Dask worker running this task (see `ArenaPlugin`)."""
    try:
        worker = get_worker()
    except ValueError:
        raise DevallocError(
            "worker_arena() gives a Dask distributed worker's arena: call it in a task "
            "that a distributed Client's workers run (not Dask's local schedulers)"
        ) from None
    plugin = worker.plugins.get(PLUGIN_NAME)
    if plugin is None or plugin.arena is None:
        raise DevallocError(
            "this Dask worker has no devalloc arena: register one with "
            "client.register_plugin(devalloc.dask.ArenaPlugin(nbytes)) first (if you did, "
            "its setup failed on this worker: see the worker's log)"
        )
    return plugin.arena
