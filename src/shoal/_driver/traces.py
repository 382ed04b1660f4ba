"""The controller's side of `@shoal.trace`: record traced calls, replay the ones that completed.

A traced call is named by its task (``<parent>.t<n>``: the n-th traced call the parent made in
its current attempt), so a retry of the task and a resumed run meet the same names in the same
order. A call is replayed (its recorded output returned, the function not run) when a call of
the same name, function and inputs succeeded earlier: first in this run (an earlier attempt of
the same task), then in the runs this one resumes, newest first. A call recorded as failed or
still running is run again: a retry exists to try what failed once more; so is a traced
generator its caller stopped iterating early (recorded ``cancelled``): its items were not all.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from shoal._spec.trace import TraceCall, TraceOutcome, TraceReplay
from shoal._storage.records import Records

# (kind, action, data), as the controller's reporter.
Report = Callable[[str, str, dict[str, Any]], None]
_DONE = ("succeeded", "replayed")


class TraceKeeper:
    def __init__(self, *, run: str, records: Records, resumes: list[str], report: Report) -> None:
        self.run = run
        self.records = records
        self.resumes = resumes
        self.report = report

    def _recorded(self, run: str, call: TraceCall) -> TraceReplay | str | None:
        """The outputs of ``call`` if it completed in ``run``, else why not (a str); None when
        ``run`` has no such action at all (it stopped before this call)."""
        old = self.records.find_action(run, call.action)
        if old is None:
            return None
        if old.kind != "trace" or old.task != call.name:
            return "another function was traced at this position"
        if json.dumps(old.inputs, sort_keys=True) != json.dumps(call.inputs, sort_keys=True):
            return "it was called with other inputs"
        if old.state not in _DONE:
            return f"it ended {old.state}"
        return TraceReplay(output=old.outputs, from_run=run)

    def _find(self, call: TraceCall) -> TraceReplay | None:
        for run in (self.run, *self.resumes):
            found = self._recorded(run, call)
            if found is not None:
                return found if isinstance(found, TraceReplay) else None
        return None

    def start(self, call: TraceCall) -> TraceReplay | None:
        rec, info = self.records, {"task": call.name, "group": list(call.group)}
        replay = self._find(call)
        if replay is None:
            rec.begin_trace(run=self.run, action_id=call.action, parent_id=call.parent_action,
                            name=call.name, env=call.env, inputs=call.inputs,
                            group_path=call.group)
            return None
        where = ("an earlier attempt of its task" if replay.from_run == self.run
                 else f"run {replay.from_run}")
        with rec.batch():
            if replay.from_run != self.run:
                rec.create_action(run=self.run, action_id=call.action,
                                  parent_id=call.parent_action, task=call.name, env=call.env,
                                  inputs=call.inputs, group_path=call.group, kind="trace")
                rec.set_action_state(self.run, call.action, "replayed", outputs=replay.output)
            rec.add_event(self.run, "replayed",
                          f"trace {call.name}: completed in {where}, not run again",
                          action_id=call.action,
                          data={"from_run": replay.from_run, "attempt": call.attempt})
        self.report("replayed", call.action, {**info, "from_run": replay.from_run,
                                              "where": where, "trace": True})
        return replay

    def end(self, outcome: TraceOutcome) -> None:
        if outcome.stopped:
            self.records.set_action_state(self.run, outcome.action, "cancelled",
                                          error=outcome.error)
        elif outcome.error is None:
            self.records.set_action_state(self.run, outcome.action, "succeeded",
                                          outputs=outcome.output)
        else:
            self.records.set_action_state(self.run, outcome.action, "failed",
                                          error=outcome.error)
        self.report("traced", outcome.action, {"task": outcome.name, "seconds": outcome.seconds,
                                               "error": outcome.error,
                                               "stopped": outcome.stopped,
                                               "group": list(outcome.group)})
