"""Where shards run: in this process, on a local process pool, or on a Ray cluster.

Every backend takes the same shard list and yields ``(shard, ShardOutput | BaseException)``
as shards finish (any order; the runner assembles by shard index). At most a few shards per
worker are in flight at once, so results stream to the driver instead of piling up.

- ``local`` with 1 worker: in this process, one shard after the other.
- ``local`` with N > 1 workers: a ``spawn`` process pool; each worker loads the model and
  data from the spec once (models such as TorchScript cannot be pickled), then receives
  shard descriptors only.
- ``ray``: one Ray task per shard (``num_cpus=1``, ``num_gpus=1`` when the model's device is
  CUDA), retried by Ray when its worker dies (``max_retries``); each Ray worker process loads
  the spec's model and data once (so the spec's paths must be readable on every node).
  Needs ``pip install ray`` (the ``ray`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from robustscope.core.errors import InputError
from robustscope.runs.shards import Shard, ThreatJob, run_shard

#: Shards in flight per worker (keeps memory bounded and every worker busy).
IN_FLIGHT_PER_WORKER = 2
#: Times Ray re-runs a shard whose worker died.
RAY_MAX_RETRIES = 3

BACKENDS = ("local", "ray")


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def run_shards(inputs, jobs: dict[str, ThreatJob], shards: list[Shard], backend: str = "local",
               workers: int | None = None, address: str | None = None, spec=None
               ) -> Iterator[tuple[Shard, object]]:
    """Run ``shards`` and yield ``(shard, ShardOutput or the exception it raised)`` as each
    finishes. ``inputs`` serve the in-process backend; worker processes load ``spec``'s
    inputs themselves (``spec`` is required for them)."""
    if backend not in BACKENDS:
        raise InputError(f"backend '{backend}' is not known; choose one of {', '.join(BACKENDS)}")
    if workers is not None and workers < 1:
        raise InputError(f"workers must be >= 1, got {workers}")
    if not shards:
        return iter(())
    if spec is None and (backend == "ray" or (workers or default_workers()) > 1):
        raise InputError("worker processes need the spec to load the model and data")
    if backend == "ray":
        return _ray(spec, jobs, shards, workers, address)
    if address is not None:
        raise InputError("--address applies to the ray backend only")
    workers = workers or default_workers()
    if workers == 1 or len(shards) == 1:
        return _in_process(inputs, jobs, shards)
    return _pool(spec, jobs, shards, workers)


def _in_process(inputs, jobs, shards) -> Iterator[tuple[Shard, object]]:
    for shard in shards:
        try:
            out = run_shard(inputs, jobs[shard.threat], shard)
        except Exception as exc:  # reported per shard; the run goes on
            yield shard, exc
            continue
        yield shard, out


# -- local process pool ----------------------------------------------------------------------
_WORKER_STATE: dict = {}


def _worker_inputs(spec):
    """The spec's loaded inputs, once per worker process (cached by the spec's JSON)."""
    key = spec.model_dump_json()
    if _WORKER_STATE.get("key") != key:
        import torch

        from robustscope.runs.runner import load_inputs

        torch.set_num_threads(1)  # one core per worker: the workers provide the parallelism
        _WORKER_STATE["inputs"] = load_inputs(spec)
        _WORKER_STATE["key"] = key
    return _WORKER_STATE["inputs"]


def _pool_init(spec, jobs) -> None:
    _WORKER_STATE["spec"] = spec
    _WORKER_STATE["jobs"] = jobs


def _pool_task(shard: Shard):
    inputs = _worker_inputs(_WORKER_STATE["spec"])
    return run_shard(inputs, _WORKER_STATE["jobs"][shard.threat], shard)


def _pool(spec, jobs, shards, workers) -> Iterator[tuple[Shard, object]]:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")
    todo = list(shards)
    with ProcessPoolExecutor(max_workers=min(workers, len(shards)), mp_context=ctx,
                             initializer=_pool_init, initargs=(spec, jobs)) as pool:
        running: dict = {}
        while todo or running:
            while todo and len(running) < workers * IN_FLIGHT_PER_WORKER:
                shard = todo.pop(0)
                try:
                    running[pool.submit(_pool_task, shard)] = shard
                except Exception as exc:  # a broken pool refuses new work
                    yield shard, exc
            if not running:
                continue
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                shard = running.pop(fut)
                exc = fut.exception()
                yield shard, (exc if exc is not None else fut.result())


# -- Ray -------------------------------------------------------------------------------------
def _import_ray():
    try:
        import ray
    except ImportError:
        raise InputError("the ray backend needs Ray: pip install 'robustscope[ray]' "
                         "(or pip install ray)") from None
    return ray


def _ray_task(spec, jobs, shard: Shard):
    return run_shard(_worker_inputs(spec), jobs[shard.threat], shard)


def _ray(spec, jobs, shards, workers, address) -> Iterator[tuple[Shard, object]]:
    ray = _import_ray()
    started_here = False
    if not ray.is_initialized():
        kwargs: dict = {"include_dashboard": False, "log_to_driver": False}
        if address is not None:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = workers or default_workers()
        env = {k: v for k, v in os.environ.items() if k in ("PYTHONPATH",)}
        if env:
            kwargs["runtime_env"] = {"env_vars": env}
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(f"cannot start or reach the Ray cluster"
                             f"{' at ' + address if address else ''}: {exc}") from exc
        started_here = True
    try:
        gpu = any(str(j.device).startswith("cuda") for j in jobs.values())
        task = ray.remote(num_cpus=1, num_gpus=1 if gpu else 0,
                          max_retries=RAY_MAX_RETRIES)(_ray_task)
        spec_ref, jobs_ref = ray.put(spec), ray.put(jobs)
        width = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        todo = list(shards)
        running: dict = {}
        while todo or running:
            while todo and len(running) < width * IN_FLIGHT_PER_WORKER:
                shard = todo.pop(0)
                running[task.remote(spec_ref, jobs_ref, shard)] = shard
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                shard = running.pop(ref)
                try:
                    yield shard, ray.get(ref)
                except Exception as exc:  # RayTaskError wraps the task's own exception
                    cause = getattr(exc, "cause", None)
                    yield shard, cause if isinstance(cause, BaseException) else exc
    finally:
        if started_here:
            ray.shutdown()
