"""The controller: turns task calls into actions and attempts, on top of any engine.

For every call (the run's root or a call made by a running task) it
1. names the action deterministically (``a0`` for the root, ``<parent>.<n>`` for the n-th call
   a parent makes), so a resumed run finds the same names;
2. checks ``depends_on`` (the engine-independent rule);
3. when the run resumes an earlier one (``shoal run --resume``), replays the call's outputs from
   the earlier run's records if that call (same action, task and inputs) completed there;
   otherwise looks the call up in the cache, and returns stored outputs on a hit;
4. runs attempts on the engine, with retries and exponential backoff (or answers them itself,
   for an environment that starts no process: `processless.py`);
5. records every step in the run records and tells the reporter.
Calls of `@shoal.trace` functions inside tasks are recorded and replayed by `traces.py`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._driver import processless
from shoal._driver.deadline import Deadline, PastDeadline
from shoal._driver.run_options import RunOptions
from shoal._driver.traces import TraceKeeper
from shoal._engines.base import AttemptOutcome, AttemptRef, Engine
from shoal._spec.call import START_CAUSES, CallSpec, EnvSpec
from shoal._spec.code import cache_key
from shoal._spec.trace import TraceCall, TraceOutcome
from shoal._storage.ray_clusters import safe_url
from shoal._storage.records import Records
from shoal._storage.store import Store, join
from shoal.errors import (
    FailureInfo,
    MissingDependencyError,
    NotFoundError,
    ObjectNotFound,
    failure_error,
)

# Reporter(kind, action, data): live progress for a CLI or notebook; must not block.
Reporter = Callable[[str, str, dict[str, Any]], None]
MAX_BACKOFF = 30.0


def _quiet(kind: str, action: str, data: dict[str, Any]) -> None:
    pass


@dataclass(frozen=True)
class _Shortcut:
    """The outputs of an action that did not run: replayed or from the cache."""

    output: Any


class Controller:
    def __init__(self, *, run: str, records: Records, store: Store, engine: Engine,
                 home: Path, reporter: Reporter | None = None,
                 resumes: list[str] | None = None, envs: Iterable[EnvSpec] = (),
                 options: RunOptions | None = None) -> None:
        self.run = run
        self.resumes = list(resumes or [])  # the runs this one resumes, newest first
        self.records = records
        self.store = store
        self.engine = engine
        self.home = home
        self._logs = home / "runs" / run / "logs"
        self.report = reporter or _quiet
        self._counters: dict[str, Iterator[int]] = defaultdict(lambda: itertools.count(1))
        self._envs: dict[str, str] = {}  # action -> environment name, while the action runs
        self._reach: dict[str, frozenset[str]] = {}  # environment -> what it may call
        # The run's environments as its driving process built them (`--override` applied).
        self._topology = {e.name: e.cluster for e in envs if e.cluster is not None}
        self.backoff = contract.retry_backoff()
        self.traces = TraceKeeper(run=run, records=records, resumes=self.resumes,
                                  report=self.report)
        self.options = options or RunOptions()  # `shoal.with_runcontext(...)`
        self._serialized: dict[str, asyncio.Future[None]] = {}  # cache key -> the call running

    # -- what the engine alone sees ----------------------------------------------------------
    def engine_event(self, kind: str, action: str, data: dict[str, Any]) -> None:
        """Record and report progress only the engine sees (gang starts, restarts, preemption)."""
        d = data
        if kind == "gang_started":
            ranks = d.get("world_size") or len(d["logs"])
            size = (f"{d['nnodes']} node(s) × {d['nproc_per_node']} = {ranks} ranks"
                    if d.get("nnodes") and d.get("nproc_per_node") else f"{ranks} ranks")
            if d.get("ray"):
                size = f"a Ray cluster: {d['ray']}"
            cause = START_CAUSES.get(str(d.get("cause")), "")
            message = (f"gang started (restart {d['restart']}, {size}"
                       f"{f', {cause}' if cause and d.get('cause') != 'first_start' else ''}, "
                       f"master port {d['master_port']}"
                       f"{', same node launchers' if d.get('same_launchers') else ''})")
        elif kind == "ray_reused":
            message = f"runs its driver on the kept Ray cluster (GCS port {d['master_port']})"
        elif kind == "gang_admitted":
            message = f"gang admitted (restart {d['restart']})"
        elif kind == "gang_restart":
            message = (f"{d['message']}; restarting the whole gang "
                       f"({d['left']} restart(s) left)")
        elif kind == "gang_preempted":
            message = "gang preempted; requeued, resumes without using a restart"
        elif kind == "gang_resized":
            cost = (f"uses a restart ({d['left']} left)" if d["uses_restart"]
                    else "no restart used")
            message = (f"gang resized {d['from']} → {d['to']} nodes: {d['reason']}; "
                       f"{cost}")
        elif kind == "ray_cluster":
            # (a stored URL is shown only when it is a plain http(s) one, as everywhere)
            url = safe_url(d.get("dashboard_url")) or "none reported"
            nodes = d.get("nodes")
            message = (f"Ray cluster up (restart {d.get('restart', 0)}, "
                       f"{len(nodes) if isinstance(nodes, list) else '?'} node(s)): "
                       f"dashboard {url}")
        elif kind == "gang_hang":
            why = "a collective timed out" if d["reason"] == "collective_timeout" else \
                "no rank's step advanced"
            message = f"gang hung ({why}): {d['summary']}; stacks in {d['stacks']}"
        else:
            message = kind
        self.records.add_event(self.run, kind, f"{data.get('task', '')}: {message}",
                               action_id=action,
                               data={k: v for k, v in data.items() if k != "logs"})
        self.report(kind, action, {**data, "message": message})

    # -- entry points --------------------------------------------------------------------
    async def run_root(self, call: CallSpec) -> Any:
        return await self._executed(call, "a0")

    async def handle(self, call: CallSpec | TraceCall | TraceOutcome) -> Any:
        """Serve what a running task asks (the engine's CallHandler): a call of another task,
        or a traced call starting or ending."""
        if isinstance(call, TraceCall):
            return self.traces.start(call)
        if isinstance(call, TraceOutcome):
            return self.traces.end(call)
        parent = call.parent_action or "a0"
        caller_env = self._envs.get(parent)
        if caller_env is not None and caller_env != call.task.env.name:
            caller_reach = self._reach.get(caller_env)
            if caller_reach is not None and call.task.env.name not in caller_reach:
                raise MissingDependencyError(caller_env, call.task.env.name, call.task.name)
        return await self._executed(self._with_run_topology(call),
                                    f"{parent}.{next(self._counters[parent])}")

    async def _executed(self, call: CallSpec, action: str) -> Any:
        release = await self._serialized_turn(call)
        try:
            return await self._execute(call, action)
        finally:
            # Only a running action makes calls: holding what ended would grow with the run.
            self._envs.pop(action, None)
            if release is not None:
                release()

    async def _serialized_turn(self, call: CallSpec) -> Callable[[], None] | None:
        """``Cache(serialize=True)``: calls with the same cache key run one at a time in this
        run, so those after the first find its outputs in the cache instead of running again
        (Flyte's rule; across concurrent runs they are not serialized). Returns the release."""
        if not call.task.cache.serialize:
            return None
        key = self._key(self.options.apply(call))
        if key is None:
            return None
        while (running := self._serialized.get(key)) is not None:
            await asyncio.shield(running)
        turn = self._serialized[key] = asyncio.get_running_loop().create_future()

        def release() -> None:
            self._serialized.pop(key, None)
            turn.set_result(None)
        return release

    def _with_run_topology(self, call: CallSpec) -> CallSpec:
        """The call with its gang sized as the run was started: `shoal run --override` changes
        the environments of the driving process only, and the worker that made this call
        imported the user's file afresh, with the topology as written."""
        env = call.task.env
        cluster = self._topology.get(env.name)
        if cluster is None or cluster == env.cluster:
            return call
        return replace(call, task=replace(call.task, env=replace(env, cluster=cluster)))

    # -- one action ----------------------------------------------------------------------
    def _cache_uri(self, call: CallSpec, key: str) -> str:
        return join(self.store.root, "cache", call.task.name, f"{key}.json")

    def _key(self, call: CallSpec) -> str | None:
        c = call.task.cache
        if c.behavior == "disable":
            return None
        return cache_key(task=call.task.name, code=call.task.code_hash,
                         signature=call.task.signature, image=call.task.env.image_tag,
                         inputs=call.inputs, ignored_inputs=c.ignored_inputs,
                         version=c.version, salt=c.salt,
                         reference_inputs=call.task.reference_inputs)

    def _cache_get(self, call: CallSpec, key: str) -> dict[str, Any] | None:
        try:
            entry = json.loads(self.store.get_bytes(self._cache_uri(call, key)))
        except ObjectNotFound:
            return None
        except ValueError:
            return None  # unreadable entry: run again and overwrite it
        return entry if isinstance(entry, dict) and "output" in entry else None

    def _cache_put(self, call: CallSpec, key: str, action: str, output: Any) -> None:
        entry = {"output": output, "run": self.run, "action": action, "task": call.task.name,
                 "created_at": time.time()}
        # Atomic put: concurrent runs that share the cache write whole entries, never halves.
        self.store.put_bytes(self._cache_uri(call, key),
                             json.dumps(entry, sort_keys=True).encode())

    def _replay(self, call: CallSpec, action: str) -> tuple[str, Any] | None:
        """(earlier run, outputs) if this very call completed in a run this one resumes."""
        want = json.dumps(dict(call.inputs), sort_keys=True)
        for earlier in self.resumes:
            try:
                old = self.records.get_action(earlier, action)
            except NotFoundError:
                continue
            if old.task != call.task.name or json.dumps(old.inputs, sort_keys=True) != want \
                    or old.custom_context != dict(call.custom_context):
                return None  # the program took another path: run it afresh
            if old.state in ("succeeded", "cached", "replayed"):
                return earlier, old.outputs
        return None

    def _log_path(self, action: str, attempt: int) -> Path:
        return self._logs / f"{action}.{attempt}.log"

    async def _execute(self, call: CallSpec, action: str) -> Any:
        """One action: its outputs without running it when it can (`_shortcut`), else from
        its attempts on the engine (`_attempts`)."""
        call = self.options.apply(call)
        self._envs[action] = call.task.env.name
        self._reach.setdefault(call.task.env.name, call.task.env.reachable)
        key = self._key(call)
        shortcut = self._shortcut(call, action, key)
        if shortcut is not None:
            return shortcut.output
        return await self._attempts(call, action, key)

    def _shortcut(self, call: CallSpec, action: str, key: str | None) -> _Shortcut | None:
        """Record the action; outputs that need no run, when there are: a replay of the run
        this one resumes, or a cache hit. None: it is recorded running, attempt 0 started."""
        task, rec = call.task, self.records
        replayed = self._replay(call, action) if self.resumes else None
        hit = (self._cache_get(call, key) if key and task.cache.behavior != "disable"
               and replayed is None and self.options.cache_read else None)
        if replayed is not None:
            with rec.batch():
                self._create_action(call, action, key)
                rec.set_action_state(self.run, action, "replayed", outputs=replayed[1])
                rec.add_event(self.run, "replayed",
                              f"{task.name}: completed in run {replayed[0]}, not run again",
                              action_id=action, data={"from_run": replayed[0]})
            self.report("replayed", action, {"task": task.name, "from_run": replayed[0]})
            return _Shortcut(replayed[1])
        if hit is not None:
            with rec.batch():
                self._create_action(call, action, key)
                rec.set_action_state(self.run, action, "cached", outputs=hit["output"],
                                     cache_hit=True)
                rec.add_event(self.run, "cache_hit",
                              f"{task.name}: outputs reused from run {hit.get('run')}",
                              action_id=action, data={"key": key, "from_run": hit.get("run")})
            self.report("cached", action, {"task": task.name, "from_run": hit.get("run")})
            return _Shortcut(hit["output"])
        # One transaction of two statements: a fan-out starts hundreds of calls a second.
        rec.start_action(run=self.run, action_id=action, parent_id=call.parent_action,
                         task=task.name, env=task.env.name, inputs=call.inputs, cache_key=key,
                         group_path=call.group, custom_context=call.custom_context,
                         log_path=str(self._log_path(action, 0)))
        return None

    def _create_action(self, call: CallSpec, action: str, key: str | None) -> None:
        self.records.create_action(run=self.run, action_id=action,
                                   parent_id=call.parent_action, task=call.task.name,
                                   env=call.task.env.name, inputs=dict(call.inputs),
                                   cache_key=key, group_path=call.group,
                                   custom_context=call.custom_context)

    async def _attempts(self, call: CallSpec, action: str, key: str | None) -> Any:
        """Run the action's attempts (attempt 0 is recorded started) until one succeeds, the
        task says a retry cannot help, the retries or the deadline run out; its outputs, or
        the failure of its last attempt raised."""
        task, rec = call.task, self.records
        failure: FailureInfo | None = None
        budget = Deadline(task.deadline, task.retries)
        for attempt in range(task.retries + 1):
            log = self._log_path(action, attempt)
            if budget.spent():  # ran out in the pause before this retry
                failure = budget.failure(task.name, action, attempt - 1)
                break
            if attempt > 0:
                rec.start_attempt(self.run, action, attempt, pid=None, log_path=str(log))
            self.report("started", action, {"task": task.name, "attempt": attempt,
                                            "log": str(log), "group": list(call.group)})
            t0 = time.monotonic()
            outcome = await self._attempt(call, action, attempt, log, budget)
            elapsed = time.monotonic() - t0
            if outcome.failure is None:
                if key is not None and self.options.cache_write:
                    self._cache_put(call, key, action, outcome.output)
                with rec.batch():
                    rec.finish_attempt(self.run, action, attempt, state="succeeded")
                    rec.set_action_state(self.run, action, "succeeded", outputs=outcome.output)
                self.report("succeeded", action, {"task": task.name, "seconds": elapsed})
                return outcome.output
            failure = outcome.failure
            rec.finish_attempt(self.run, action, attempt, state="failed",
                               exit_code=failure.exit_code, signal=failure.signal,
                               error=failure.message)
            if failure.error_type == "NonRecoverableError" or budget.spent():
                break  # the task said a retry cannot help (Flyte 2's rule), or no time is left
            if attempt < task.retries:
                await self._pause_before_retry(call, action, attempt, failure, budget)
        assert failure is not None  # the loop ran at least once and did not return
        error = failure_error(failure)
        rec.set_action_state(self.run, action, "failed", error=str(error))
        self.report("failed", action, {"task": task.name, "message": failure.message})
        raise error

    async def _attempt(self, call: CallSpec, action: str, attempt: int, log: Path,
                       budget: Deadline) -> AttemptOutcome:
        """One attempt on the engine, bounded by the deadline. A cancelled run and an engine
        fault are recorded on the action before they propagate, so nothing stays running."""
        task, rec = call.task, self.records
        bounded, ref = budget.attempt_call(call), AttemptRef(self.run, action, attempt, log)
        try:
            # An Echo or Sleep call is answered here, on every engine; the engine never sees it.
            outcome = await budget.bound(processless.answer(bounded, ref)
                                         if task.env.processless
                                         else self.engine.run_attempt(bounded, ref))
            if budget.spent() and outcome.failure is not None:
                outcome = AttemptOutcome(failure=budget.failure(task.name, action, attempt))
            return outcome
        except PastDeadline:
            return AttemptOutcome(failure=budget.failure(task.name, action, attempt))
        except asyncio.CancelledError:
            with rec.batch():
                rec.finish_attempt(self.run, action, attempt, state="cancelled")
                rec.set_action_state(self.run, action, "cancelled")
            self.report("cancelled", action, {"task": task.name})
            raise
        except BaseException as e:  # an engine fault: recorded, so nothing stays running
            with rec.batch():
                rec.finish_attempt(self.run, action, attempt, state="failed",
                                   error=f"{type(e).__name__}: {e}")
                rec.set_action_state(self.run, action, "failed",
                                     error=f"{type(e).__name__}: {e}")
            raise

    async def _pause_before_retry(self, call: CallSpec, action: str, attempt: int,
                                  failure: FailureInfo, budget: Deadline) -> None:
        task = call.task
        delay = (task.backoff.delay(attempt) if task.backoff is not None
                 else min(self.backoff * 2**attempt, MAX_BACKOFF))
        self.records.add_event(self.run, "retry", f"{task.name} attempt {attempt} failed "
                               f"({failure.message}); retrying in {delay:.1f}s",
                               action_id=action)
        self.report("retry", action, {"task": task.name, "attempt": attempt,
                                      "message": failure.message, "delay": delay})
        await asyncio.sleep(budget.pause(delay))
