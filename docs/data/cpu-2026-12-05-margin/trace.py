"""Per-request stage trace of one engine bench run (a diagnostic; see ana.py).

Wraps ``xinfer-bench`` and patches the engine of 2026-12-05 20:59 UTC (whose
``_on_unit`` took the event's fields; the engine JSON's ``lateness`` now reports the
same split): per request, each stage's ready, launch, forward start and end times and
its formed batch's size, its budget, deadline and status. Usage: python trace.py OUT
engine ARGS (as xinfer-bench); OUT is the trace's JSON file.
"""

import json
import sys

rows: dict[int, dict] = {}


def install() -> None:
    """Wrap the engine's preparation, launch, unit completion and finish."""
    from xinfer_ros.engine import engine

    cls = engine.StageEngine
    on_unit, issue, finish, prepared = cls._on_unit, cls._issue, cls._finish, cls._on_prepared

    def row(live) -> dict:
        return rows.setdefault(live.rid, {"stages": {}})

    def prepared_traced(self, live, state, error):
        prepared(self, live, state, error)
        row(live)["ready0"] = self.clock.now()

    def issue_traced(self, launch, now, opening, *, formed=False):
        live = launch.request.payload
        row(live)["stages"][int(launch.stage)] = {"ready": live.ready_since, "launch": now}
        return issue(self, launch, now, opening, formed=formed)

    def on_unit_traced(self, live, stage, t0, t1, error):  # noqa: PLR0917
        planned = self._formed.predicted.get((stage, live.rid))
        unit = row(live)["stages"].setdefault(int(stage), {})
        unit.update(t0=t0, t1=t1, size=planned[0] if planned else None,
                    pred=planned[1] if planned else None)
        return on_unit(self, live, stage, t0, t1, error)

    def finish_traced(self, live, status, reason, actions=None):
        req = live.request
        row(live).update(status=str(status), submitted=live.submitted, end=self.clock.now(),
                         budget=req.budget if req else None,
                         deadline=req.deadline if req else None)
        return finish(self, live, status, reason, actions)

    cls._on_unit, cls._issue = on_unit_traced, issue_traced
    cls._finish, cls._on_prepared = finish_traced, prepared_traced


if __name__ == "__main__":
    out = sys.argv.pop(1)
    install()
    from xinfer_ros.cli.bench import main

    try:
        rc = main(sys.argv[1:])
    finally:
        with open(out, "w") as fh:
            json.dump(rows, fh)
    sys.exit(rc)
