"""Torch backend: the reference VLA of ``xinfer_ros.model`` on CPU or CUDA.

The only engine module that imports torch; :func:`xinfer_ros.engine.backends.make_backend`
imports it lazily, so the emulated backend works without torch.

On CUDA every lane thread gets its own stream (context lanes for ViT/Prefill, action
lanes for Action), so units of different lanes overlap on the device; each unit
synchronises its own stream before reporting completion, which also orders the
hand-off of a request's tensors from the context lanes to the action lanes. On CPU
every lane uses ``threads`` intra-op threads (1 by default): concurrency comes from
the lanes, and OpenMP spin-waiting across oversubscribed lanes is avoided.

``action_processes=N`` (CPU) runs Action units in N worker processes instead of the
action lane threads, as the paper runs Action in a process of its own (§4.2): the
model's Python overhead then no longer contends for one interpreter lock with ViT,
Prefill and the dispatcher. Each worker builds the same seeded weights; a unit sends
the prefix K/V (a few hundred KiB for ``tiny``) and the RTC inputs over a pipe and
gets the chunk back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing as mp
import os
import queue
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from xinfer_ros.core.constants import COMMIT_LENGTH
from xinfer_ros.core.stages import Stage
from xinfer_ros.engine.backends.base import Backend, InputValidationError, StateFactory
from xinfer_ros.engine.lanes import LaneInfo
from xinfer_ros.model import stages as model_stages
from xinfer_ros.model.config import VLAConfig, load_preset
from xinfer_ros.model.processing import postprocess_actions, prepare_request
from xinfer_ros.model.request import RequestState, StageProgress
from xinfer_ros.model.vla import ReferenceVLA

__all__ = ["INPUT_KEYS", "TorchBackend"]

_LOG = logging.getLogger("xinfer_ros.engine.torch")

#: Keys a torch request's inputs mapping may carry (``images``, ``instruction`` and
#: ``state`` are required).
INPUT_KEYS = ("images", "instruction", "state", "prev_chunk", "d", "prev_shift", "rtc_mode",
              "seed")


class TorchBackend(Backend):
    """Run the reference VLA's stage functions on per-request state.

    Args:
        model: preset name (``tiny``, ``vla-2b``, ``pi05``) or YAML path.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: parameter dtype name (preset default when None).
        threads: intra-op threads per lane on CPU.
        checkpoint: optional ``save_pretrained`` directory (random weights otherwise).
        guidance: apply RTC guidance when a request carries a previous chunk.
        seed: weight seed (preset default when None).
        action_processes: CPU only: run Action units in this many worker processes
            (0: in the action lane threads).
        action_cpus: CPU only, with ``action_processes``: pin the worker processes to
            these CPUs (see :mod:`xinfer_ros.engine.affinity`); None leaves them free.
    """

    name = "torch"
    emulated = False

    def __init__(
        self,
        model: str = "tiny",
        device: str = "cpu",
        *,
        dtype: str | None = None,
        threads: int = 1,
        checkpoint: str | None = None,
        guidance: bool = True,
        seed: int | None = None,
        action_processes: int = 0,
        action_cpus: Sequence[int] | None = None,
    ) -> None:
        self.device = str(device)
        self.threads = int(threads)
        self.guidance = guidance
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r} requested but torch.cuda is not available")
        if not self.device.startswith("cuda"):
            torch.set_num_threads(self.threads)
        torch_dtype = None
        if dtype is not None:
            from xinfer_ros.model.vla import resolve_dtype
            torch_dtype = resolve_dtype(dtype)
        if checkpoint:
            self.model = ReferenceVLA.from_pretrained(checkpoint, device=self.device,
                                                      dtype=torch_dtype)
        else:
            self.model = _build(load_preset(model), self.device, seed, torch_dtype)
        self.config_: VLAConfig = self.model.config
        spec = self.config_.action
        self.action_shape = (spec.horizon, spec.action_dim)
        self.model_name = self.config_.name
        self._examples: dict[int, dict[str, Any]] = {}
        self._workers: _ActionWorkers | None = None
        if action_processes:
            if self.device.startswith("cuda") or checkpoint:
                raise ValueError("action_processes needs a CPU preset model (no checkpoint)")
            cpus = tuple(int(c) for c in action_cpus) if action_cpus is not None else None
            worker = _WorkerSpec(model, seed, dtype, self.threads, guidance, cpus)
            self._workers = _ActionWorkers(action_processes, worker)
        elif action_cpus is not None:
            raise ValueError("action_cpus pins Action worker processes: it needs "
                             "action_processes >= 1")
        _LOG.info("torch backend: model=%s device=%s dtype=%s threads/lane=%d",
                  self.model_name, self.device, self.model.dtype, self.threads)

    @property
    def action_worker_pids(self) -> tuple[int, ...]:
        """Process ids of the Action workers (empty without ``action_processes``)."""
        return self._workers.pids if self._workers is not None else ()

    # -- lanes --------------------------------------------------------------------------
    def lane_setup(self, lane: LaneInfo) -> None:
        """Give CUDA lanes their own stream; pin CPU lanes' intra-op threads."""
        if self.device.startswith("cuda"):
            torch.cuda.set_device(torch.device(self.device))
            lane.stream = torch.cuda.Stream(device=self.device)
        else:
            torch.set_num_threads(self.threads)

    # -- request path ---------------------------------------------------------------------
    def prepare(self, inputs: Any, request_id: int, robot_id: str) -> RequestState:
        """Validate inputs with the model's ``prepare_request`` (raises InputError)."""
        if not isinstance(inputs, Mapping):
            raise InputValidationError("inputs", f"expected a mapping with images, instruction "
                                                 f"and state, got {type(inputs).__name__}")
        missing = [k for k in ("images", "instruction", "state") if k not in inputs]
        if missing:
            raise InputValidationError(missing[0], "required input is missing")
        unknown = sorted(set(inputs) - set(INPUT_KEYS))
        if unknown:
            raise InputValidationError(unknown[0], f"unknown input; known: {list(INPUT_KEYS)}")
        prepared = prepare_request(
            self.config_, self.model.tokenizer, inputs["images"], inputs["instruction"],
            inputs["state"], prev_chunk=inputs.get("prev_chunk"), d=inputs.get("d", 0),
            prev_shift=inputs.get("prev_shift", 0), rtc_mode=inputs.get("rtc_mode", "soft"),
            seed=int(inputs.get("seed", request_id)), request_id=f"{robot_id}/{request_id}")
        return RequestState(prepared)

    def run_stage(self, stage: Stage, state: Any, lane: LaneInfo | None) -> None:
        """Run one stage function; on CUDA on the lane's stream, synchronised at the end."""
        stream = lane.stream if lane is not None else None
        if stream is not None:
            with torch.cuda.stream(stream):
                self._call(stage, state)
            stream.synchronize()
        else:
            self._call(stage, state)

    def _call(self, stage: Stage, state: RequestState) -> None:
        if stage is Stage.VIT:
            model_stages.vit(self.model, state)
        elif stage is Stage.PREFILL:
            model_stages.prefill(self.model, state)
        elif self._workers is not None:
            self._workers.run(state)
        else:
            model_stages.action(self.model, state, guidance=self.guidance)

    def finish(self, state: Any) -> np.ndarray:
        """Unnormalise the chunk and copy the committed prefix (model postprocessing)."""
        return postprocess_actions(state.actions, self.config_, state.prepared.rtc)

    def release(self, state: Any) -> None:
        """Drop the request's KV cache and tokens."""
        if isinstance(state, RequestState):
            state.release()
            state.actions = None

    # -- benchmarks and calibration -------------------------------------------------------
    def example_inputs(self, robot_index: int, previous: np.ndarray | None) -> dict[str, Any]:
        """Fixed synthetic camera images and state per robot; RTC (d=8) after the first chunk."""
        base = self._examples.get(robot_index)
        if base is None:
            rng = np.random.default_rng(1000 + robot_index)
            images = [rng.integers(0, 256, (c.height, c.width, 3), dtype=np.uint8)
                      for c in self.config_.cameras]
            state = rng.uniform(-0.5, 0.5, self.config_.action.state_dim)
            base = {"images": images, "instruction": "pick up the parcel and place it in the bin",
                    "state": state, "seed": robot_index}
            self._examples[robot_index] = base
        out = dict(base)
        if previous is not None:
            d = min(COMMIT_LENGTH, self.action_shape[0] // 2)
            out.update(prev_chunk=previous, d=d, prev_shift=d)
        return out

    def state_factory(self) -> StateFactory:
        """Fresh states at each stage sharing one precomputed prefix (read-only)."""
        inputs = self.example_inputs(0, np.zeros(self.action_shape))
        prepared = self.prepare(inputs, 0, "calibration").prepared
        warm = RequestState(prepared)
        model_stages.vit(self.model, warm)
        visual = warm.visual_tokens
        model_stages.prefill(self.model, warm)
        cache, prefix_len = warm.cache, warm.prefix_len

        def fresh(stage: Stage) -> RequestState:
            if stage is Stage.VIT:
                return RequestState(prepared)
            if stage is Stage.PREFILL:
                return RequestState(prepared, visual_tokens=visual, progress=StageProgress.PREFILL)
            return RequestState(prepared, cache=cache, prefix_len=prefix_len,
                                progress=StageProgress.ACTION)
        return fresh

    def close(self) -> None:
        """Stop the Action worker processes, if any."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    def describe(self) -> dict[str, Any]:
        """Report entry with the model preset and dtype."""
        d = super().describe()
        d.update(model=self.model_name, dtype=str(self.model.dtype), threads_per_lane=self.threads,
                 torch=torch.__version__, guidance=self.guidance,
                 action_processes=0 if self._workers is None else self._workers.size,
                 action_cpus=(None if self._workers is None or self._workers.cpus is None
                              else list(self._workers.cpus)),
                 main_cpus=sorted(os.sched_getaffinity(0)))
        if self.device.startswith("cuda"):
            d["gpu"] = torch.cuda.get_device_name(torch.device(self.device))
        return d


def _build(config: VLAConfig, device: str, seed: int | None,
           dtype: torch.dtype | None) -> ReferenceVLA:
    """Build seeded random weights; on CUDA initialise them on the device.

    ``ReferenceVLA.build`` initialises on the CPU and then moves the weights, which
    takes minutes for ``vla-2b``; under a CUDA default device the same code
    initialises on the GPU in seconds (different random values, same shapes, still
    seeded). Falls back to the CPU path if the device build fails.
    """
    if device.startswith("cuda"):
        try:
            with torch.device(device):
                return ReferenceVLA.build(config, device=device, seed=seed, dtype=dtype)
        except (RuntimeError, TypeError, ValueError) as exc:  # pragma: no cover - CUDA only
            _LOG.warning("on-device build failed (%s); building on the CPU", exc)
    return ReferenceVLA.build(config, device=device, seed=seed, dtype=dtype)


@dataclasses.dataclass(frozen=True)
class _WorkerSpec:
    """What an Action worker process needs to rebuild the parent's weights."""

    preset: str
    seed: int | None
    dtype: str | None
    threads: int
    guidance: bool
    cpus: tuple[int, ...] | None = None


@dataclasses.dataclass
class _LayerKV:
    """One layer's cached prefix keys and values (what ``action`` reads of a cache)."""

    keys: torch.Tensor
    values: torch.Tensor


@dataclasses.dataclass
class _PrefixCache:
    """Duck-typed stand-in for ``DynamicCache`` in a worker: ``layers[i].keys/values``."""

    layers: list[_LayerKV]


class _ActionWorkers:
    """A pool of processes that run Action units (CPU).

    Every unit checks a worker out, so at most ``size`` Action units run in processes
    at once; the engine's Action slots should not exceed ``size``.
    """

    def __init__(self, size: int, spec: _WorkerSpec) -> None:
        ctx = mp.get_context("spawn")  # fork would copy the parent's threads' locks
        self.size = int(size)
        self.cpus = spec.cpus
        self._idle: queue.Queue[tuple[Any, Connection]] = queue.Queue()
        self._procs: list[Any] = []
        for _ in range(self.size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_action_worker_main, args=(child, spec), daemon=True,
                               name="xinfer-action-worker")
            proc.start()
            child.close()
            self._procs.append(proc)
            self._idle.put((proc, parent))
        for _ in range(self.size):  # wait until every worker has built its model
            proc, conn = self._idle.get()
            try:
                status = conn.recv()
            except EOFError:
                status = (f"worker exited with code {proc.exitcode} (with the spawn start "
                          f"method the main module must be import-safe: guard it with "
                          f"if __name__ == '__main__')")
            if status != "ready":
                raise RuntimeError(f"action worker failed to start: {status}")
            self._idle.put((proc, conn))

    @property
    def pids(self) -> tuple[int, ...]:
        """The workers' process ids."""
        return tuple(p.pid for p in self._procs if p.pid is not None)

    def run(self, state: RequestState) -> None:
        """Run ``state``'s Action unit in a free worker; sets ``state.actions``."""
        state.expect(StageProgress.ACTION)
        if state.cache is None:
            raise RuntimeError("prefix cache was released before action")
        kv = [(layer.keys.numpy(), layer.values.numpy()) for layer in state.cache.layers]
        prepared = dataclasses.replace(state.prepared, pixel_groups=())
        proc, conn = self._idle.get()
        try:
            conn.send((prepared, kv, state.prefix_len))
            kind, payload = conn.recv()
        finally:
            self._idle.put((proc, conn))
        if kind != "ok":
            raise RuntimeError(payload)
        state.actions = torch.from_numpy(payload)
        state.progress = StageProgress.DONE

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
    """Worker process: build the same seeded model, then serve Action units."""
    try:
        if spec.cpus is not None:
            os.sched_setaffinity(0, set(spec.cpus))
        torch.set_num_threads(spec.threads)
        torch_dtype = None
        if spec.dtype is not None:
            from xinfer_ros.model.vla import resolve_dtype
            torch_dtype = resolve_dtype(spec.dtype)
        model = ReferenceVLA.build(load_preset(spec.preset), device="cpu", seed=spec.seed,
                                   dtype=torch_dtype)
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
        prepared, kv, prefix_len = msg
        try:
            cache = _PrefixCache([_LayerKV(torch.from_numpy(k), torch.from_numpy(v))
                                  for k, v in kv])
            req = RequestState(prepared, cache=cache, prefix_len=prefix_len,  # type: ignore[arg-type]
                               progress=StageProgress.ACTION)
            model_stages.action(model, req, guidance=spec.guidance)
            assert req.actions is not None
            conn.send(("ok", req.actions.detach().numpy()))
        except Exception as exc:  # a faulty unit fails alone
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
