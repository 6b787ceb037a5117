"""Scale-out on Ray (``xrt tune ... --address HOST:PORT``): the tuner's workers as Ray actors.

Local runs need none of this (and no Ray). With ``--address`` the driver (the ``xrt tune`` process)
joins the Ray cluster and keeps the search and the journal, which stays the single record; the
workers become actors:

* compile actors, ``--jobs`` of them, one CPU each (Ray places them on CPU nodes), and
* one timing actor per GPU of the cluster (``num_gpus=1``: Ray pins it to its GPU through
  ``CUDA_VISIBLE_DEVICES``); a cluster without GPUs gets one CPU timing actor.

Each actor holds one :class:`xrt.tune.process.Worker` process, so a config that crashes or hangs
kills that process, not the actor, and is recorded as a crash / timeout as locally. An actor that
dies itself (its node gone) is restarted by Ray (``max_restarts``); the config it held is recorded
as a crash and the search goes on.
"""

from __future__ import annotations

import os
from typing import Any

from xrt import device_env


def _ray():
    try:
        import ray
    except ImportError as e:
        raise RuntimeError('--address needs Ray: pip install -c requirements/constraints.txt -e ".[ray]"') from e
    return ray


class Cluster:
    """The Ray side of one search: joins the cluster, makes and stops the actors."""

    def __init__(self, address: str) -> None:
        ray = _ray()
        self.ray = ray
        _reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, ignore_reinit_error=True)
        except Exception as e:  # noqa: BLE001 - one line naming the address
            raise RuntimeError(f"--address {address}: cannot join the Ray cluster ({type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''})") from None
        self.gpus = int(ray.cluster_resources().get("GPU", 0))
        self._actor_cls = ray.remote(max_restarts=4, max_task_retries=0)(_WorkerActor)
        self.actors: list[Any] = []

    def slots(self, jobs: int) -> tuple[int, int]:
        """(compile actors, timing actors)."""
        return jobs, max(1, self.gpus)

    def worker(self, cmd: list[str], env: dict[str, str], log: str, start_timeout: float, gpu: bool) -> RemoteWorker:
        opts = {"num_cpus": 1, "num_gpus": 1} if gpu and self.gpus else {"num_cpus": 1}
        a = self._actor_cls.options(**opts).remote(cmd, env, log, start_timeout)
        self.actors.append(a)
        return RemoteWorker(self.ray, a, log)

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.ray.shutdown()


def _reachable(address: str, timeout: float = 5.0) -> None:
    """Ray retries an unreachable address for minutes, then exits the process: look first."""
    import socket

    host, _, port = address.rpartition(":")
    if address in ("auto", "local"):
        return
    if not host or not port.isdigit():
        raise RuntimeError(f"--address {address}: give the head node as HOST:PORT (e.g. 10.0.0.5:6379)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise RuntimeError(f"--address {address}: cannot join the Ray cluster (nothing answers there: "
                           f"{e.strerror or e})") from None


class _WorkerActor:
    """Runs in the actor's process: one local Worker, started on the actor's node."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: str, start_timeout: float) -> None:
        from pathlib import Path

        from xrt.tune.process import Worker

        # the driver's environment, then this node's GPU pinning (Ray sets CUDA_VISIBLE_DEVICES)
        full = {**env, **{k: v for k, v in os.environ.items() if k == device_env.CUDA_VISIBLE}}
        self.w = Worker.from_cmd(cmd, full, Path(log), start_timeout)

    def where(self) -> str:
        import socket

        return f"{socket.gethostname()}:{os.getpid()}:{os.environ.get(device_env.CUDA_VISIBLE, 'cpu')}"

    def ask(self, cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
        from xrt.tune.process import TuneError, WorkerGone

        try:
            ans = self.w.ask(cfg, timeout)
        except WorkerGone as e:
            return {"__gone__": e.status, "detail": e.detail}
        except TuneError as e:
            return {"__fatal__": str(e)}
        ans["actor"] = self.where()
        return ans

    def stop(self) -> None:
        self.w.stop()


class RemoteWorker:
    """The driver's handle on an actor, with the local Worker's ``ask`` / ``stop``."""

    def __init__(self, ray: Any, actor: Any, log: str) -> None:
        from pathlib import Path

        self.ray, self.actor, self.log = ray, actor, Path(log)

    def ask(self, cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
        from xrt.tune.process import TuneError, WorkerGone

        try:
            ans = self.ray.get(self.actor.ask.remote(cfg, timeout))
        except Exception as e:  # noqa: BLE001 - the actor died (its node, or Ray itself): a crash of this config
            raise WorkerGone("crash", f"the Ray actor died ({type(e).__name__}); Ray restarts it") from None
        if "__gone__" in ans:
            raise WorkerGone(ans["__gone__"], ans["detail"])
        if "__fatal__" in ans:
            raise TuneError(ans["__fatal__"])
        return ans

    def stop(self) -> None:
        try:
            self.ray.get(self.actor.stop.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - gone already
            pass
