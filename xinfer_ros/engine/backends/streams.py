"""Device streams of the torch backend's lanes, behind one small interface (issue 16, item 2).

Every lane thread runs its units on a stream of its own (:class:`CudaStreams`) or on
none (:class:`CpuStreams`). Three rules keep tensors that cross lanes correct:

* a unit synchronises its lane's stream before it reports completion, so the next
  stage (on another lane's stream) only starts on finished tensors;
* before a unit runs, the tensors it reads from earlier stages are marked as used by
  its stream (``record_stream``): the caching allocator then does not hand their memory
  to another stream while this one may still read them, even if the stage drops its
  last reference before the stream is done;
* work a thread queued on the default stream outside any lane (the calibration's
  warm-up state, compilation) is finished before lanes read its results (:meth:`settle`).

Host-to-device copies of request inputs go through pinned memory with
``non_blocking=True`` (:func:`xinfer_ros.model.transfer.to_device`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TypeAlias, cast

import torch

__all__ = ["CpuStreams", "CudaStreams", "LaneStream", "LaneStreams", "make_streams"]

#: A lane's stream as :class:`~xinfer_ros.engine.lanes.LaneInfo` holds it: what
#: :meth:`LaneStreams.create` made (a CUDA stream), or None where the device has none.
LaneStream: TypeAlias = object


class LaneStreams:
    """What the torch backend asks of a device's streams (CPU: nothing happens)."""

    def select(self) -> None:
        """Make the device current on the calling thread (a thread's first call)."""

    def create(self) -> LaneStream:
        """A stream for a new lane (None: no streams on this device)."""
        return None

    @contextlib.contextmanager
    def running_on(self, stream: LaneStream) -> Iterator[None]:
        """Queue the work of the ``with`` block on ``stream``."""
        yield

    def hand_over(self, tensors: Iterable[torch.Tensor], stream: LaneStream) -> None:
        """Mark tensors made on other streams as read by ``stream``."""

    def finish(self, stream: LaneStream) -> None:
        """Wait until everything queued on ``stream`` has run."""

    def settle(self) -> None:
        """Wait until the calling thread's default-stream work has run."""


class CpuStreams(LaneStreams):
    """No streams: CPU work is done when the call returns."""


class CudaStreams(LaneStreams):
    """One CUDA stream per lane on one device.

    Args:
        device: a CUDA device (``cuda`` or ``cuda:N``; without an index, the current).
    """

    def __init__(self, device: torch.device) -> None:
        self.index = device.index if device.index is not None else torch.cuda.current_device()

    def select(self) -> None:
        """See :meth:`LaneStreams.select`."""
        # "cuda" has no index, and set_device refuses an index-less device.
        torch.cuda.set_device(self.index)

    def create(self) -> LaneStream:
        """Select the lane thread's device and give it a stream of its own."""
        self.select()
        return torch.cuda.Stream(device=self.index)  # type: ignore[no-untyped-call]

    @contextlib.contextmanager
    def running_on(self, stream: LaneStream) -> Iterator[None]:
        """See :meth:`LaneStreams.running_on`."""
        if stream is None:
            yield
            return
        with torch.cuda.stream(cast(torch.cuda.Stream, stream)):
            yield

    def hand_over(self, tensors: Iterable[torch.Tensor], stream: LaneStream) -> None:
        """See :meth:`LaneStreams.hand_over`."""
        if stream is None:
            return
        for tensor in tensors:
            if tensor.is_cuda:
                tensor.record_stream(cast(torch.cuda.Stream, stream))

    def finish(self, stream: LaneStream) -> None:
        """See :meth:`LaneStreams.finish`."""
        if stream is not None:
            cast(torch.cuda.Stream, stream).synchronize()

    def settle(self) -> None:
        """See :meth:`LaneStreams.settle`."""
        torch.cuda.current_stream(self.index).synchronize()


def make_streams(device: str) -> LaneStreams:
    """The streams of ``device`` (``cpu``, ``cuda``, ``cuda:N``)."""
    dev = torch.device(device)
    return CudaStreams(dev) if dev.type == "cuda" else CpuStreams()
