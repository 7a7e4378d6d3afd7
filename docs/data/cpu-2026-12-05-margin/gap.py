"""The dispatcher's round trip per Action unit in one engine bench run (a diagnostic).

Wraps ``xinfer-bench`` and patches the engine of 2026-12-05 20:57 UTC (whose
``_on_unit`` took the event's fields; it now takes the event): for each Action unit,
the time from its forward's end to the dispatcher handling it, and from its launch to
its forward's start. Usage: python gap.py engine ARGS (as xinfer-bench).
"""

import statistics as st
import sys

ends_to_dispatcher: list[float] = []
launch_to_start: list[float] = []
launched: dict[tuple[int, int], float] = {}


def install() -> None:
    """Wrap the engine's unit completion and launch."""
    from xinfer_ros.core.stages import Stage
    from xinfer_ros.engine import engine

    cls = engine.StageEngine
    on_unit, issue = cls._on_unit, cls._issue

    def on_unit_timed(self, live, stage, t0, t1, error):  # noqa: PLR0917
        if stage == Stage.ACTION:
            ends_to_dispatcher.append((self.clock.now() - t1) * 1e3)
            at = launched.pop((live.rid, stage), None)
            if at is not None:
                launch_to_start.append((t0 - at) * 1e3)
        return on_unit(self, live, stage, t0, t1, error)

    def issue_timed(self, launch, now, opening, *, formed=False):
        launched[(launch.request.payload.rid, launch.stage)] = now
        return issue(self, launch, now, opening, formed=formed)

    cls._on_unit, cls._issue = on_unit_timed, issue_timed


def quantiles(x: list[float]) -> str:
    """Mean and p50 / p90 / p99 of ``x`` (ms)."""
    x, n = sorted(x), len(x)
    return (f"n={n} mean={st.mean(x):.2f} p50={x[n // 2]:.2f} p90={x[int(n * 0.9)]:.2f} "
            f"p99={x[int(n * 0.99)]:.2f}")


if __name__ == "__main__":
    install()
    from xinfer_ros.cli.bench import main

    try:
        rc = main(sys.argv[1:])
    finally:
        print("ACTION end->dispatcher ms:", quantiles(ends_to_dispatcher), file=sys.stderr)
        print("ACTION launch->start ms:", quantiles(launch_to_start), file=sys.stderr)
    sys.exit(rc)
