"""Where shards run: in this process, on a local process pool, or on a Ray cluster.

Every backend takes the same shard list and yields ``(shard, ShardOutput | BaseException)``
as shards finish (any order; the runner assembles by shard index). At most a few shards per
worker are in flight at once, so results stream to the driver instead of piling up. With
``on_progress``, the shards in flight also report how many of their inputs are done
(``on_progress(shard.key, done, working)``, a few times a second, called in the driver
between results; see :class:`~robustscope.runs.execute.ShardReporter`): directly in this
process, through a queue from a process pool or a Ray cluster.

- ``local`` with 1 worker: in this process, one shard after the other.
- ``local`` with N > 1 workers: a ``spawn`` process pool; each worker process holds one
  :class:`ShardWorker`, which loads the model and data from the spec once (models such as
  TorchScript cannot be pickled), then receives shard descriptors only.
- ``ray``: one Ray actor per worker (``num_cpus=1``, ``num_gpus=1`` when the model's device is
  CUDA), each a :class:`ShardWorker` that loads the spec's model and data once (so the
  spec's paths must be readable on every node) and runs the shards sent to it. An actor whose
  process dies is restarted and its shards are run again (up to :data:`RAY_MAX_RETRIES`
  times). Needs ``pip install ray`` (the ``ray`` extra).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue as queue_module
from collections.abc import Callable, Iterator

from robustscope.core.errors import InputError
from robustscope.runs.execute import run_shard
from robustscope.runs.inputs import LoadedInputs, load_inputs
from robustscope.runs.lifeline import die_with_parent, ignore_interrupts
from robustscope.runs.shards import Shard, ShardOutput, ThreatJob
from robustscope.runs.spec import EvaluationSpec
from robustscope.runs.stopping import handlers_kept

#: Shards in flight per worker (keeps memory bounded and every worker busy).
IN_FLIGHT_PER_WORKER = 2
#: Times Ray restarts an actor whose process died, and re-runs each of its shards.
RAY_MAX_RETRIES = 3

BACKENDS = ("local", "ray")
#: Seconds the driver waits for a result before it reads the progress reports again.
PROGRESS_TICK = 0.5

log = logging.getLogger("robustscope.runs.backends")


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class ShardWorker:
    """Runs shards in a worker process: loads ``spec``'s inputs (model, data, feature space)
    on the first shard, once, with torch on one thread (the workers provide the
    parallelism), then searches each shard it is given under ``jobs[shard.threat]``."""

    def __init__(self, spec: EvaluationSpec, jobs: dict[str, ThreatJob]) -> None:
        self.spec = spec
        self.jobs = jobs
        self._inputs: LoadedInputs | None = None

    @property
    def inputs(self) -> LoadedInputs:
        if self._inputs is None:
            import torch

            torch.set_num_threads(1)
            self._inputs = load_inputs(self.spec)
        return self._inputs

    def run(self, shard: Shard, sink: object = None) -> ShardOutput:
        """The shard's output; ``sink`` (a queue with ``put_nowait``, or ``None``) receives
        ``(shard.key, done, working)`` as the search goes."""
        return run_shard(self.inputs, self.jobs[shard.threat], shard,
                         None if sink is None else _reporting_to(sink, shard.key))


def _reporting_to(sink: object, key: str) -> Callable[[int, float], None]:
    """A shard's progress callback that puts ``(key, done, working)`` into ``sink``; a report
    that cannot be delivered is dropped (progress never fails a shard)."""
    def report(done: int, working: float) -> None:
        try:
            sink.put_nowait((key, done, working))
        except Exception as exc:  # a full or closed queue, a dead queue actor
            log.debug("progress report of shard %s dropped: %s", key, exc)
    return report


def _deliver(reports: list, running_keys: set[str],
             on_progress: Callable[[str, int, float], None]) -> None:
    """Pass each ``(key, done, working)`` of ``reports`` on, for shards still in flight only
    (a report may arrive after its shard's result)."""
    for key, done, working in reports:
        if key in running_keys:
            on_progress(key, done, working)


def _drain(q: object) -> list:
    """Everything waiting in the multiprocessing queue ``q`` now."""
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except (queue_module.Empty, OSError, ValueError, EOFError):
            return out


def run_shards(inputs: LoadedInputs, jobs: dict[str, ThreatJob], shards: list[Shard],
               backend: str = "local", workers: int | None = None, address: str | None = None,
               spec: EvaluationSpec | None = None,
               on_progress: Callable[[str, int, float], None] | None = None
               ) -> Iterator[tuple[Shard, object]]:
    """Run ``shards`` and yield ``(shard, ShardOutput or the exception it raised)`` as each
    finishes. ``inputs`` serve the in-process backend; worker processes load ``spec``'s
    inputs themselves (``spec`` is required for them). ``on_progress(shard.key, done,
    working)``, when given, hears how far each shard in flight is (inputs finished, and that
    plus the open inputs' share of planned passes; cumulative, at most ``len(shard)``; not
    for a shard already yielded)."""
    if backend not in BACKENDS:
        raise InputError(f"backend '{backend}' is not known; choose one of {', '.join(BACKENDS)}")
    if workers is not None and workers < 1:
        raise InputError(f"workers must be >= 1, got {workers}")
    if not shards:
        return (out for out in ())  # a generator, like every backend's (it has close())
    if spec is None and (backend == "ray" or (workers or default_workers()) > 1):
        raise InputError("worker processes need the spec to load the model and data")
    if backend == "ray":
        return _ray(spec, jobs, shards, workers, address, on_progress)
    if address is not None:
        raise InputError("--address applies to the ray backend only")
    workers = workers or default_workers()
    if workers == 1 or len(shards) == 1:
        return _in_process(inputs, jobs, shards, on_progress)
    return _pool(spec, jobs, shards, workers, on_progress)


def _in_process(inputs: LoadedInputs, jobs: dict[str, ThreatJob], shards: list[Shard],
                on_progress: Callable[[str, int, float], None] | None
                ) -> Iterator[tuple[Shard, object]]:
    for shard in shards:
        report = (None if on_progress is None else
                  (lambda done, working, key=shard.key: on_progress(key, done, working)))
        try:
            out = run_shard(inputs, jobs[shard.threat], shard, report)
        except Exception as exc:  # reported per shard; the run goes on
            yield shard, exc
            continue
        yield shard, out


# -- local process pool ----------------------------------------------------------------------
#: The worker of this pool process (set by the pool's initializer; a process pool hands its
#: tasks plain functions, so the worker object lives in the process).
_pool_worker: list[ShardWorker] = []
#: The progress queue of this pool process, or ``None`` (set with the worker).
_pool_sink: list = [None]


def _pool_init(spec: EvaluationSpec, jobs: dict[str, ThreatJob], parent_pid: int,
               sink: object = None) -> None:
    die_with_parent(parent_pid)
    ignore_interrupts()
    if sink is not None:
        sink.cancel_join_thread()  # reports not yet sent never hold up the process's exit
    _pool_worker[:] = [ShardWorker(spec, jobs)]
    _pool_sink[0] = sink


def _pool_task(shard: Shard) -> ShardOutput:
    return _pool_worker[0].run(shard, _pool_sink[0])


def _pool(spec: EvaluationSpec, jobs: dict[str, ThreatJob], shards: list[Shard],
          workers: int, on_progress: Callable[[str, int, float], None] | None
          ) -> Iterator[tuple[Shard, object]]:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")
    todo = list(shards)
    sink = ctx.Queue() if on_progress is not None else None
    pool = ProcessPoolExecutor(max_workers=min(workers, len(shards)), mp_context=ctx,
                               initializer=_pool_init,
                               initargs=(spec, jobs, os.getpid(), sink))
    try:
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
            done, _ = wait(running, return_when=FIRST_COMPLETED,
                           timeout=None if sink is None else PROGRESS_TICK)
            if sink is not None:
                _deliver(_drain(sink), {s.key for s in running.values()}, on_progress)
            for fut in done:
                shard = running.pop(fut)
                exc = fut.exception()
                yield shard, (exc if exc is not None else fut.result())
    except BaseException:
        # interrupted (Ctrl-C, SIGTERM) or abandoned by the caller: the shards in flight
        # are lost anyway (finished ones are on disk), so end the workers now instead of
        # waiting for their shards
        stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if sink is not None:
            sink.close()


def stop_workers(pool: object, timeout: float = 5.0) -> None:
    """Kill the worker processes of a ``ProcessPoolExecutor`` ``pool`` and wait up to
    ``timeout`` seconds for them; its pending tasks are cancelled."""
    kill = getattr(pool, "kill_workers", None)  # Python >= 3.14
    if kill is not None:
        kill()
        pool.shutdown(wait=False, cancel_futures=True)
        return
    # before shutdown, which forgets them; the pool offers no public handle before 3.14
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        if proc.is_alive():
            proc.kill()
    for proc in processes:
        proc.join(timeout)


# -- Ray -------------------------------------------------------------------------------------
def _import_ray():
    try:
        import ray
    except ImportError:
        raise InputError("the ray backend needs Ray: pip install 'robustscope[ray]' "
                         "(or pip install ray)") from None
    return ray


def ray_init_options(workers: int | None, address: str | None, quiet: bool) -> dict:
    """Keyword arguments of ``ray.init`` for a run: no dashboard, workers' output kept off the
    driver's terminal, ``workers`` CPUs for a local cluster (or the cluster at ``address``),
    the driver's ``PYTHONPATH`` in the workers; ``quiet`` (``robustscope run -q``, which sets
    robustscope's loggers to ERROR) leaves out Ray's banner and info lines."""
    kwargs: dict = {"include_dashboard": False, "log_to_driver": False}
    if address is not None:
        kwargs["address"] = address
    else:
        kwargs["num_cpus"] = workers or default_workers()
    env = {k: v for k, v in os.environ.items() if k in ("PYTHONPATH",)}
    if env:
        kwargs["runtime_env"] = {"env_vars": env}
    if quiet:
        kwargs["logging_level"] = logging.ERROR
    return kwargs


def _ray(spec: EvaluationSpec, jobs: dict[str, ThreatJob], shards: list[Shard],
         workers: int | None, address: str | None,
         on_progress: Callable[[str, int, float], None] | None = None
         ) -> Iterator[tuple[Shard, object]]:
    ray = _import_ray()
    started_here = False
    actors: list = []
    running: dict = {}                          # object ref -> (shard, actor number)
    sink = None                                 # the progress queue (an actor)
    try:
        if not ray.is_initialized():
            quiet = logging.getLogger("robustscope").getEffectiveLevel() >= logging.ERROR
            kwargs = ray_init_options(workers, address, quiet)
            if quiet:  # Ray logs its banner (and notes) before init applies logging_level
                logging.getLogger("ray").setLevel(logging.ERROR)
            started_here = True                 # shut down below, even if init fails midway
            try:
                # ray.init installs SIGTERM handlers of its own (the driver's exits, the
                # core worker's dumps a C++ stack and aborts): this process's are put back
                with handlers_kept():
                    ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise InputError(f"cannot start or reach the Ray cluster"
                                 f"{' at ' + address if address else ''}: {exc}") from exc
        gpu = any(str(j.device).startswith("cuda") for j in jobs.values())
        actor_class = ray.remote(num_cpus=1, num_gpus=1 if gpu else 0,
                                 max_restarts=RAY_MAX_RETRIES,
                                 max_task_retries=RAY_MAX_RETRIES)(ShardWorker)
        width = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        actors = [actor_class.remote(spec, jobs) for _ in range(min(width, len(shards)))]
        if on_progress is not None:
            sink = _ray_progress_queue()
        load = [0] * len(actors)                # shards in flight per actor
        todo = list(shards)
        while todo or running:
            while todo and min(load) < IN_FLIGHT_PER_WORKER:
                k = load.index(min(load))
                shard = todo.pop(0)
                running[actors[k].run.remote(shard, sink)] = (shard, k)
                load[k] += 1
            done, _ = ray.wait(list(running), num_returns=1,
                               timeout=None if sink is None else PROGRESS_TICK)
            if sink is not None:
                _deliver(_drain_ray(sink), {s.key for s, _ in running.values()}, on_progress)
            for ref in done:
                shard, k = running.pop(ref)
                load[k] -= 1
                try:
                    yield shard, ray.get(ref)
                except Exception as exc:  # RayTaskError wraps the task's own exception
                    cause = getattr(exc, "cause", None)
                    yield shard, cause if isinstance(cause, BaseException) else exc
    finally:
        try:
            for ref in running:   # interrupted: not retried on the killed actors (nor noted)
                ray.cancel(ref)
            for actor in actors:
                ray.kill(actor)
            if sink is not None:
                with contextlib.suppress(Exception):
                    sink.shutdown()
        finally:
            if started_here:
                ray.shutdown()


def _ray_progress_queue() -> object | None:
    """A Ray queue for progress reports (an actor that takes no CPU, so it never holds a
    worker's slot), or ``None`` when it cannot be made (the run goes on, its bar advancing
    per shard)."""
    try:
        from ray.util.queue import Queue

        return Queue(actor_options={"num_cpus": 0})
    except Exception as exc:
        log.warning("no progress within shards on this Ray cluster: %s", exc)
        return None


def _drain_ray(sink: object) -> list:
    """Everything waiting in the Ray queue ``sink`` now (nothing when it cannot be read)."""
    try:
        n = sink.qsize()
        return sink.get_nowait_batch(n) if n else []
    except Exception as exc:
        log.debug("progress reports not read: %s", exc)
        return []
