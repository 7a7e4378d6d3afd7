"""Torch backend: a :class:`~xinfer_ros.model.serving.StageModel` on CPU or CUDA.

The model is any preset family: transformers' π0 (``pi0``, ``pi0-tiny``, a checkpoint
directory) or the paper-shaped reference VLA (``tiny``, ``vla-2b``, ``pi05``). This is
the only engine module that imports torch; :func:`xinfer_ros.engine.backends.make_backend`
imports it lazily, so the emulated backend works without torch.

On CUDA every lane thread gets its own stream (context lanes for ViT/Prefill, action
lanes for Action), so units of different lanes overlap on the device; the hand-over of
a request's tensors between lanes follows :mod:`~xinfer_ros.engine.backends.streams`
(each unit synchronises its stream before it reports completion, and marks the
tensors it reads as used by its stream). On CPU every lane uses ``threads`` intra-op
threads (1 by default): concurrency comes from the lanes, and OpenMP spin-waiting
across oversubscribed lanes is avoided.

``action_processes=N`` (CPU) runs Action units in N worker processes instead of the
action lane threads, as the paper runs Action in a process of its own (§4.2): the
model's Python overhead then no longer contends for one interpreter lock with ViT,
Prefill and the dispatcher. Each worker loads the same model (same preset, checkpoint
and seed); a unit sends the prefix K/V and the CPU inputs over a pipe and gets the
chunk back. The workers buy parallelism only while another model unit runs in the
parent: a lone Action unit (nothing else running, the fleet's common case at low
load) runs in the parent's lane thread instead, which saves the hand-over to another
process (measured: a request took 1.26x a plain ``sample_actions`` call through a
worker, 1.08x in process; see docs/BENCHMARKS.md). ``inline_idle_action=False``
sends every Action unit to a worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from collections.abc import Hashable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np
import torch

from xinfer_ros.core.constants import COMMIT_LENGTH
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine.backends.base import Backend, StateFactory
from xinfer_ros.engine.backends.graph_threads import GraphThread
from xinfer_ros.engine.backends.streams import make_streams
from xinfer_ros.engine.lanes import LaneInfo
from xinfer_ros.model.inputs import RequestInputs
from xinfer_ros.model.loading import load_stage_model
from xinfer_ros.model.request import StagedState
from xinfer_ros.model.serving import StageModel

__all__ = ["TorchBackend"]

_LOG = logging.getLogger("xinfer_ros.engine.torch")

class TorchBackend(Backend[StagedState]):
    """Run a :class:`~xinfer_ros.model.serving.StageModel`'s stages on per-request state.

    Args:
        model: preset name (``pi0``, ``pi0-tiny``, ``tiny``, ``vla-2b``, ``pi05``) or
            YAML path.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: parameter dtype name (preset default when None).
        threads: intra-op threads per lane on CPU.
        model_path: checkpoint directory (π0: either layout; reference: its
            ``save_pretrained``); random weights when None (π0: the preset's own).
        guidance: apply RTC guidance when a request carries a previous chunk.
        seed: weight seed (preset default when None).
        action_processes: CPU only: run Action units in this many worker processes
            (0: in the action lane threads).
        action_cpus: CPU only, with ``action_processes``: pin the worker processes to
            these CPUs (see :mod:`xinfer_ros.engine.affinity`); None leaves them free.
        compile: how the Action loop runs: ``off`` (eager), ``on`` (``torch.compile``
            of the expert step) or ``cudagraphs`` (CUDA graphs; one Action lane only;
            13x eager on an H200 alone; every Action forward then runs on one
            :class:`~xinfer_ros.engine.backends.graph_threads.GraphThread`); π0
            family only. The backend compiles guided and
            unguided steps for every batch size up to ``max_batch`` with every camera
            before it returns, in each worker process too; another camera set
            compiles once on its first unit.
        max_batch: the largest batch the engine will run (its ``max_batch``): with
            ``compile``, batches up to it are compiled before serving, so that the
            first batched unit under load does not stall its lane for the compiler.
        inline_idle_action: with ``action_processes``, run an Action unit in this
            process when no other model unit runs here (the workers buy nothing then).
    """

    name = "torch"
    emulated = False

    def __init__(
        self,
        model: str = "pi0-tiny",
        device: str = "cpu",
        *,
        dtype: str | None = None,
        threads: int = 1,
        model_path: str | None = None,
        guidance: bool = True,
        seed: int | None = None,
        action_processes: int = 0,
        action_cpus: Sequence[int] | None = None,
        compile: str = "off",
        max_batch: int = 1,
        inline_idle_action: bool = True,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.device = str(device)
        # On CPU a lane is its intra-op thread count only, the same for every group; a
        # CUDA lane holds a stream of its own, and whole chains on one lane's stream
        # have not been measured on a GPU: there the fast path only takes the
        # dispatcher's steps and leaves each unit to its own lane.
        self.chains_stages = not self.device.startswith("cuda")
        self.inline_idle_action = inline_idle_action
        #: Model units running in this process's lanes now (Action units sent to a
        #: worker included), and Action units run here although workers exist.
        self._running = 0
        self._running_lock = threading.Lock()
        self.inline_action_units = 0
        self.threads = int(threads)
        self.guidance = guidance
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r} requested but torch.cuda is not available")
        if action_cpus is not None and not action_processes:
            raise ValueError("action_cpus pins Action worker processes: it needs "
                             "action_processes >= 1")
        if action_processes and self.device.startswith("cuda"):
            raise ValueError("action_processes runs Action on the CPU; not with a CUDA device")
        if not self.device.startswith("cuda"):
            torch.set_num_threads(self.threads)
        self._streams = make_streams(self.device)
        source = _ModelSource(model, model_path or None, seed, dtype, compile)
        self.model: StageModel = source.load(self.device)
        self.io = self.model.io
        self.can_batch = self.model.batches
        #: Batch sizes the compile warm-up runs: 1 up to this.
        self.warm_batches = max_batch if self.can_batch else 1
        self.action_shape = self.io.action_shape
        self.model_name = self.io.name
        self._examples: dict[int, RequestInputs] = {}
        self._workers: _ActionWorkers | None = None
        if action_processes:
            cpus = tuple(int(c) for c in action_cpus) if action_cpus is not None else None
            self._workers = _ActionWorkers(action_processes,
                                           _WorkerSpec(source, self.threads, guidance, cpus))
        #: Where every Action forward runs under ``cudagraphs``, so that graphs are
        #: recorded and replayed on the thread that owns them (None until first used).
        self._graphs: GraphThread | None = None
        #: Seconds the Action loop took to compile (0 when eager).
        try:
            self.compile_s = self._warm_up() if compile != "off" else 0.0
        except BaseException:
            self.close()  # the workers and the graph thread started for the warm-up
            raise
        self._worker_compile = compile
        _LOG.info("torch backend: model=%s device=%s dtype=%s threads/lane=%d compile=%s",
                  self.model_name, self.device, self.model.dtype, self.threads, compile)
        if self.device.startswith("cuda") and compile == "off" and self.io.family == "pi0":
            _LOG.warning("torch backend: eager π0 Action loop on %s, which kernel launches "
                         "bound on a GPU (CUDA graphs ran it 13x faster on an H200, "
                         "docs/BENCHMARKS.md 1.4): try compile 'cudagraphs' with one "
                         "Action slot (not yet verified serving on a GPU, 1.5)", self.device)

    def set_compile(self, mode: str) -> float:
        """Switch the in-process Action loop to ``mode``, compiling it now.

        Returns:
            Seconds spent compiling (0 for ``off``).

        Raises:
            ValueError: on a mode the model lacks, or with Action worker processes
                (their mode is fixed when they start).
        """
        if self._workers is not None and mode != self._worker_compile:
            raise ValueError("Action worker processes keep the compile mode they started "
                             f"with ({self._worker_compile!r})")
        previous = self.model.compile_mode
        self.model.set_compile(mode)
        try:
            self.compile_s = self._warm_up() if mode != "off" else 0.0
        except Exception:
            self.model.set_compile(previous)  # never serve in a mode that failed to build
            raise
        return self.compile_s

    @property
    def compile_mode(self) -> str:
        """How the in-process Action loop runs (``off``, ``on``, ``cudagraphs``)."""
        return self.model.compile_mode

    def _graph_thread(self) -> GraphThread | None:
        """The graph thread under ``cudagraphs`` (opened on first use), else None.

        One for the backend's lifetime: the model keeps the compiled step, which keeps
        the tree manager of the thread that recorded it, so a later switch back into
        ``cudagraphs`` must replay on that same thread.
        """
        if self.model.compile_mode != "cudagraphs":
            return None
        if self._graphs is None:
            self._graphs = GraphThread(setup=self._streams.select)
        return self._graphs

    def _warm_up(self) -> float:
        """Compile the Action loop now, guided and unguided, wherever Action units run."""
        t0 = time.perf_counter()
        self._graph_thread()  # opened now, so that the graphs are recorded where they replay
        inline, inline_units = self.inline_idle_action, self.inline_action_units
        try:
            self._compile_units()
        finally:
            self.inline_idle_action, self.inline_action_units = inline, inline_units
        seconds = time.perf_counter() - t0
        _LOG.info("torch backend: Action loop compiled in %.1f s (batches of 1 to %d)",
                  seconds, self.warm_batches)
        return seconds

    def _compile_units(self) -> None:
        """Every batch size up to ``warm_batches``, of either kind, in every process.

        torch.compile specialises on the batch size until a second size marks it
        dynamic, so every size is run (under ``cudagraphs`` each size also records
        graphs of its own). With worker processes, a lone unit still runs in this
        process under ``inline_idle_action``, so this process is compiled as well.
        """
        guided = self.state_factory()
        workers = self._workers.size if self._workers is not None else 0
        # Workers are checked out in turn: one batch per worker reaches every one.
        here = [False] * workers + ([True] if not workers or self.inline_idle_action else [])
        for kind in ("unguided", "guided"):
            for size in range(1, self.warm_batches + 1):
                for inline in here:
                    self.inline_idle_action = inline
                    states = [guided(Stage.ACTION) if kind == "guided" else
                              self._prefilled(self.example_inputs(0, None))
                              for _ in range(size)]
                    self.run_batch(Stage.ACTION, states, None)
                    for state in states:
                        self.release(state)
        self._streams.settle()

    def _prefilled(self, inputs: RequestInputs) -> StagedState:
        state = self.prepare(inputs, 0, "warm-up")
        self.model.vit(state)
        self.model.prefill(state)
        return state

    @property
    def action_worker_pids(self) -> tuple[int, ...]:
        """Process ids of the Action workers (empty without ``action_processes``)."""
        return self._workers.pids if self._workers is not None else ()

    # -- lanes --------------------------------------------------------------------------
    def lane_setup(self, lane: LaneInfo) -> None:
        """Set up a lane thread: a stream of its own on CUDA, the intra-op threads on CPU."""
        lane.stream = self._streams.create()
        if lane.stream is None:
            torch.set_num_threads(self.threads)

    # -- request path ---------------------------------------------------------------------
    def prepare(self, inputs: RequestInputs, request_id: int, robot_id: str) -> StagedState:
        """Validate inputs with the model's preparation (raises InputError)."""
        return self.model.prepare(
            inputs.images, inputs.instruction, inputs.state, prev_chunk=inputs.prev_chunk,
            d=inputs.commit, prev_shift=inputs.prev_shift, rtc_mode=inputs.rtc_mode,
            seed=request_id if inputs.seed is None else inputs.seed,
            request_id=f"{robot_id}/{request_id}", prev_dims=inputs.prev_dims)

    def run_stage(self, stage: Stage, state: StagedState, lane: LaneInfo | None) -> None:
        """Run one stage unit (a batch of one)."""
        self.run_batch(stage, [state], lane)

    def batch_key(self, stage: Stage, state: StagedState) -> Hashable | None:
        """The model's batch key: states of one key stack into one forward."""
        return self.model.batch_key(state)

    def run_batch(self, stage: Stage, states: Sequence[StagedState], lane: LaneInfo | None) -> None:
        """Run one (batched) stage forward; on CUDA on the lane's stream, synchronised.

        Synchronising the lane's own stream before reporting completion also orders
        the hand-off of the states' tensors to the next stage's lane.
        """
        stream = lane.stream if lane is not None else None
        streams = self._streams
        for state in states:
            streams.hand_over(state.device_inputs(stage), stream)
        with self._running_lock:
            self._running += 1
            alone = self._running == 1
        try:
            forward = functools.partial(self._forward, stage, states, stream, alone)
            graphs = self._graph_thread() if stage is Stage.ACTION else None
            if graphs is not None:
                graphs.call(forward)  # the lane waits; its stream still orders the work
            else:
                forward()
            streams.finish(stream)
        finally:
            with self._running_lock:
                self._running -= 1

    def _forward(self, stage: Stage, states: Sequence[StagedState], stream: object,
                 alone: bool) -> None:
        with self._streams.running_on(stream):
            if stage is Stage.ACTION and self._workers is not None and not (
                    alone and self.inline_idle_action):
                self._workers.run(self.model, states)
            else:
                if stage is Stage.ACTION and self._workers is not None:
                    self.inline_action_units += 1  # only the lone unit gets here
                self.model.run_batch(stage, states, guidance=self.guidance)

    def finish(self, state: StagedState) -> np.ndarray:
        """Unnormalise the chunk and copy the committed prefix (model postprocessing)."""
        return self.model.finish(state)

    def release(self, state: StagedState) -> None:
        """Drop the request's device tensors."""
        if hasattr(state, "release"):
            self.model.release(state)

    # -- benchmarks and calibration -------------------------------------------------------
    def example_inputs(self, robot_index: int, previous: np.ndarray | None) -> RequestInputs:
        """Fixed synthetic camera images and state per robot; RTC (d=8) after the first chunk."""
        base = self._examples.get(robot_index)
        if base is None:
            rng = np.random.default_rng(1000 + robot_index)
            images = [rng.integers(0, 256, (c.height, c.width, 3), dtype=np.uint8)
                      for c in self.model.io.cameras]
            state = rng.uniform(-0.5, 0.5, self.model.io.state_dim)
            base = RequestInputs(images=tuple(images),
                                 instruction="pick up the parcel and place it in the bin",
                                 state=state, seed=robot_index)
            self._examples[robot_index] = base
        if previous is None:
            return base
        d = min(COMMIT_LENGTH, self.action_shape[0] // 2)
        return dataclasses.replace(base, prev_chunk=previous, commit=d, prev_shift=d)

    def state_factory(self) -> StateFactory[StagedState]:
        """Fresh states at each stage sharing one precomputed prefix (read-only)."""
        inputs = self.example_inputs(0, np.zeros(self.action_shape))
        warm = self.prepare(inputs, 0, "calibration")
        at_vit = self.model.copy_at(warm, Stage.VIT)
        self.model.vit(warm)
        at_prefill = self.model.copy_at(warm, Stage.PREFILL)
        self.model.prefill(warm)
        starts = {Stage.VIT: (at_vit, Stage.VIT),
                  Stage.PREFILL: (at_prefill, Stage.PREFILL),
                  Stage.ACTION: (warm, Stage.ACTION)}
        # The prefix was made on this thread's default stream; lanes read it on theirs.
        self._streams.settle()

        def fresh(stage: Stage) -> StagedState:
            state, progress = starts[stage]
            return self.model.copy_at(state, progress)
        return fresh

    def close(self) -> None:
        """Stop the Action worker processes and the CUDA graph thread, if any."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None
        if self._graphs is not None:
            self._graphs.close()
            self._graphs = None

    def describe(self) -> dict[str, Any]:
        """Report entry with the model preset and dtype."""
        d = super().describe()
        d.update(model=self.model_name, family=self.model.io.family, dtype=str(self.model.dtype),
                 threads_per_lane=self.threads, torch=torch.__version__, guidance=self.guidance,
                 compile=self.model.compile_mode, compile_s=self.compile_s,
                 action_processes=0 if self._workers is None else self._workers.size,
                 inline_idle_action=self.inline_idle_action,
                 action_cpus=(None if self._workers is None or self._workers.cpus is None
                              else list(self._workers.cpus)),
                 main_cpus=sorted(os.sched_getaffinity(0)))
        if self.device.startswith("cuda"):
            d["gpu"] = torch.cuda.get_device_name(torch.device(self.device))
        return d


@dataclasses.dataclass(frozen=True)
class _ModelSource:
    """Where a model comes from, so that a worker process loads the very same weights."""

    preset: str
    model_path: str | None
    seed: int | None
    dtype: str | None
    compile: str = "off"

    def load(self, device: str) -> StageModel:
        return load_stage_model(self.preset, model_path=self.model_path, device=device,
                                dtype=self.dtype, seed=self.seed, compile_mode=self.compile)


@dataclasses.dataclass(frozen=True)
class _WorkerSpec:
    """What an Action worker process needs to rebuild the parent's model."""

    source: _ModelSource
    threads: int
    guidance: bool
    cpus: tuple[int, ...] | None = None


class _ActionWorkers:
    """A pool of processes that run Action units (CPU).

    Every Action unit or batch checks a worker out, so at most ``size`` of them run in
    processes at once; the engine's Action lanes should not exceed ``size``.
    """

    def __init__(self, size: int, spec: _WorkerSpec) -> None:
        ctx = mp.get_context("spawn")  # fork would copy the parent's threads' locks
        self.size = int(size)
        self.cpus = spec.cpus
        self._idle: queue.Queue[tuple[BaseProcess, Connection]] = queue.Queue()
        self._procs: list[BaseProcess] = []
        for _ in range(self.size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_action_worker_main, args=(child, spec), daemon=True,
                               name="xinfer-action-worker")
            proc.start()
            child.close()
            self._procs.append(proc)
            self._idle.put((proc, parent))
        for _ in range(self.size):  # wait until every worker has built its model
            worker, conn = self._idle.get()
            try:
                status = conn.recv()
            except EOFError:
                status = (f"worker exited with code {worker.exitcode} (with the spawn start "
                          f"method the main module must be import-safe: guard it with "
                          f"if __name__ == '__main__')")
            if status != "ready":
                raise RuntimeError(f"action worker failed to start: {status}")
            self._idle.put((worker, conn))

    @property
    def pids(self) -> tuple[int, ...]:
        """The workers' process ids."""
        return tuple(p.pid for p in self._procs if p.pid is not None)

    def run(self, model: StageModel, states: Sequence[Any]) -> None:
        """Run the states' Action units as one batch in a free worker; sets their actions.

        ``states`` are the model's own state types, which carry ``actions`` (the
        :class:`StagedState` base declares only the stage order).
        """
        for state in states:
            state.expect(Stage.ACTION)
        payloads = [model.action_payload(state) for state in states]
        proc, conn = self._idle.get()
        try:
            conn.send(payloads)
            kind, result = conn.recv()
        finally:
            self._idle.put((proc, conn))
        if kind != "ok":
            raise RuntimeError(result)
        for state, actions in zip(states, result, strict=True):
            state.actions = torch.from_numpy(actions)
            state.progress = None

    def close(self) -> None:
        """Ask every worker to exit and reap it."""
        for _ in range(self.size):
            proc, conn = self._idle.get()
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(None)
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.terminate()


def _action_worker_main(conn: Connection, spec: _WorkerSpec) -> None:
    """Worker process: load the same model, then serve Action units."""
    # The parent owns the worker's life (a None message or a closed pipe ends it); a
    # Ctrl-C, which the terminal sends to the whole process group, is the parent's.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if spec.cpus is not None:
            os.sched_setaffinity(0, set(spec.cpus))
        torch.set_num_threads(spec.threads)
        model = spec.source.load("cpu")
        conn.send("ready")
    except Exception as exc:  # report instead of dying silently
        conn.send(f"{type(exc).__name__}: {exc}")
        return
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        try:
            states: list[Any] = [model.action_state(payload) for payload in msg]
            model.run_batch(Stage.ACTION, states, guidance=spec.guidance)
            conn.send(("ok", [state.actions.detach().numpy() for state in states]))
        except Exception as exc:  # a faulty batch fails alone
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
