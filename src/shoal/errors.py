"""Every error Shoal raises, in one tree.

    ShoalError
    ├── UserError                 the user can fix it: bad spec, bad input, bad call
    │   ├── SpecError             a field of an environment/task/resource/image is invalid
    │   │   ├── UnsupportedTypeError  a type hint Shoal cannot serialize (at definition time)
    │   │   └── InputError        a value does not match the declared type
    │   ├── MissingDependencyError  a task calls an environment not reachable via depends_on
    │   ├── NotFoundError         a run, action, task or file the user named does not exist
    │   └── UserCodeError         the user's file cannot be imported (syntax error, exception)
    ├── TaskFailed                a task failed after its retries (Flyte: BaseRuntimeError);
    │   │                         `.code` and `.kind` say how, `.info` where
    │   ├── RuntimeUserError      ... the task's code raised (code: the exception's type name)
    │   │   ├── OOMError          ... it went past its memory limit and was killed
    │   │   ├── TaskTimeout       ... it ran past its `timeout` (Flyte: TaskTimeoutError)
    │   │   └── NonRecoverableError  raised by a task to fail at once, without retries
    │   ├── RuntimeSystemError    ... Shoal or the machine failed under it
    │   └── RuntimeUnknownError   ... its process died (a signal, an exit code)
    ├── RunCancelled              the run was cancelled (`shoal cancel`)
    └── ShoalSystemError          Shoal itself or its infrastructure failed
        ├── StoreError            the object store failed (third-party errors translated here)
        │   └── ObjectNotFound
        └── EngineError           the engine could not start or talk to a process

``FailureInfo`` (``TaskFailed.info``: task, action, attempt, rank, node, exit code or signal,
log tail) is the one value here that is not an error, exported for code that annotates with it.

User errors say the field, the value, the rule and the fix. Third-party exceptions are
translated into this tree at one place per layer (store backends, the local process layer).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BaseRuntimeError",
    "EngineError",
    "FailureInfo",
    "InputError",
    "MissingDependencyError",
    "NonRecoverableError",
    "NotFoundError",
    "OOMError",
    "ObjectNotFound",
    "RunCancelled",
    "RuntimeSystemError",
    "RuntimeUnknownError",
    "RuntimeUserError",
    "ShoalError",
    "ShoalSystemError",
    "SpecError",
    "StoreError",
    "TaskFailed",
    "TaskTimeout",
    "TaskTimeoutError",
    "UnsupportedTypeError",
    "UserCodeError",
    "UserError",
]


class ShoalError(Exception):
    """Base of every error Shoal raises."""


class UserError(ShoalError):
    """Something the user wrote or passed is wrong; the message says how to fix it."""


def _render(field: str, value: object, rule: str, fix: str | None) -> str:
    shown = repr(value)
    if len(shown) > 200:
        shown = shown[:197] + "..."
    msg = f"{field}={shown}: {rule}"
    if fix:
        msg += f". Fix: {fix}"
    return msg


class SpecError(UserError, ValueError):
    """A field of a user object is invalid.

    ``str(err)`` reads ``field=value: rule. Fix: fix``; the parts stay available as attributes
    so tools (the CLI, tests) can use them.
    """

    def __init__(self, field: str, value: object, rule: str, fix: str | None = None) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        self.fix = fix
        super().__init__(_render(field, value, rule, fix))

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.field, self.value, self.rule, self.fix))


class UnsupportedTypeError(SpecError, TypeError):
    """A parameter or return type that Shoal cannot move between processes."""


class InputError(SpecError, TypeError):
    """A value passed to (or returned from) a task does not match its declared type, or the
    arguments of a call do not match its signature."""


class MissingDependencyError(UserError):
    """A task called a task whose environment its own environment does not depend on."""

    def __init__(self, caller_env: str, callee_env: str, task: str) -> None:
        self.caller_env = caller_env
        self.callee_env = callee_env
        self.task = task
        super().__init__(
            f"depends_on: environment {caller_env!r} called task {task!r} of environment "
            f"{callee_env!r}, which is not reachable from {caller_env!r} through depends_on. "
            f"Fix: add the TaskEnvironment named {callee_env!r} to depends_on=[...] of the "
            f"TaskEnvironment named {caller_env!r}"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.caller_env, self.callee_env, self.task))


class NotFoundError(UserError, LookupError):
    """A run, action, task or file named by the user does not exist."""


class UserCodeError(UserError):
    """The user's file (or a module it imports) failed while Shoal imported it: a syntax error,
    or an exception raised at import time. ``str(err)`` is ``file:line: Type: message``, then
    that line with a caret under the failing part, then a fix where one is known."""


@dataclass(frozen=True)
class FailureInfo:
    """Where and how a task attempt failed; what a failure report is made of."""

    task: str
    action: str
    attempt: int
    # "user" (the task raised), "crash" (process died), "oom", "timeout", "queued_timeout"
    # (not admitted within its max_queued_time), "system"
    kind: str
    message: str
    exit_code: int | None = None
    signal: str | None = None
    rank: int | None = None
    node: int | None = None
    log_tail: str = ""
    traceback: str = ""
    error_type: str = ""  # the exception's class name, when the task raised
    # The action whose traceback and log tail this failure carries: a call it made whose
    # failure it passes on ('' when they are its own).
    origin_action: str = ""


_TRACEBACK_HEADER = "Traceback (most recent call last):"


def tail_after_traceback(log_tail: str, traceback: str) -> str:
    """The lines of ``log_tail`` that are not the ``traceback`` it ends with: the task printed
    the traceback as its last lines, and a report that shows both shows it once."""
    tail, tb = log_tail.rstrip().splitlines(), traceback.rstrip().splitlines()
    if not tb:
        return log_tail
    same = 0
    while same < min(len(tail), len(tb)) and tail[-1 - same] == tb[-1 - same]:
        same += 1
    if same < len(tb) and same < len(tail) and tail[-1 - same] == _TRACEBACK_HEADER:
        same += 1  # the tail's traceback is the end of this one (a caller's adds its frames)
    elif same < len(tb) and same < len(tail):
        return log_tail
    return "\n".join(tail[:len(tail) - same])


class TaskFailed(ShoalError):
    """A task failed after all its retries. ``info`` says where and how.

    Raised as the subclass its kind names (`failure_error`), so code written for Flyte 2 that
    catches ``flyte.errors.RuntimeUserError`` and reads ``e.code`` works unchanged.
    """

    def __init__(self, info: FailureInfo) -> None:
        self.info = info
        super().__init__(self.render())

    @property
    def code(self) -> str:
        """Flyte's error code: the exception's type name for a task that raised, else the
        kind of failure ("OOMKilled", "Timeout", "Killed", "SystemError")."""
        i = self.info
        if i.kind == "user":
            return i.error_type or "UserError"
        return {"oom": "OOMKilled", "timeout": "Timeout", "crash": "Killed"}.get(i.kind,
                                                                                 "SystemError")

    @property
    def kind(self) -> str:
        """Flyte's error kind: "user", "system" or "unknown"."""
        return {"crash": "unknown", "system": "system"}.get(self.info.kind, "user")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.info,))

    def render(self) -> str:
        details = self.details()
        return f"{self.headline()}\n{details}" if details else self.headline()

    def headline(self) -> str:
        """Which call failed and how, in one line (as long as the message is one line)."""
        i = self.info
        where = f"task {i.task!r} (action {i.action}, attempt {i.attempt}"
        if i.rank is not None:
            where += f", rank {i.rank}"
        if i.node is not None:
            where += f", node {i.node}"
        where += ")"
        how = i.message
        if i.exit_code is not None:
            how += f" [exit code {i.exit_code}]"
        if i.signal is not None:
            how += f" [killed by {i.signal}]"
        return f"{where} failed: {how}"

    def details(self) -> str:
        """The traceback, then the last lines of the log that are not that traceback again."""
        i = self.info
        parts = [i.traceback.rstrip()] if i.traceback.strip() else []
        tail = tail_after_traceback(i.log_tail, i.traceback).rstrip()
        if tail:
            lines = "\n".join("  | " + line for line in tail.splitlines())
            parts.append(f"last lines of its log:\n{lines}")
        return "\n".join(parts)


BaseRuntimeError = TaskFailed  # Flyte 2's name for the base of task failures


class RuntimeUserError(TaskFailed):
    """The task's own code raised; ``code`` is the exception's type name."""


class OOMError(RuntimeUserError):
    """The task went past its memory limit and its process tree was killed."""


class TaskTimeout(RuntimeUserError):
    """A task ran past its ``timeout``; its whole process tree was killed."""


TaskTimeoutError = TaskTimeout  # Flyte 2's name


class NonRecoverableError(RuntimeUserError):
    """Raise it in a task (``raise NonRecoverableError("bad input")``) to fail the call at once:
    the controller spends no retries on it. Caught by a caller, it is a `RuntimeUserError`."""

    def __init__(self, info: FailureInfo | str, code: str = "NonRecoverableError") -> None:
        if isinstance(info, str):  # raised by user code with a message
            info = FailureInfo(task="", action="", attempt=0, kind="user", message=info,
                               error_type="NonRecoverableError")
        self.raised_by_user = not info.task
        super().__init__(info)

    def render(self) -> str:
        return self.info.message if self.raised_by_user else super().render()

    def headline(self) -> str:
        return self.info.message if self.raised_by_user else super().headline()


class RuntimeSystemError(TaskFailed):
    """Shoal or the machine failed under the task (not the task's code)."""


class RuntimeUnknownError(TaskFailed):
    """The task's process died: a signal or an exit code, with no exception of its own."""


def failure_error(info: FailureInfo) -> TaskFailed:
    """The error a failed call raises in its caller, of the class its kind names."""
    if info.error_type == "NonRecoverableError":
        return NonRecoverableError(info)
    cls: type[TaskFailed] = {"user": RuntimeUserError, "oom": OOMError, "timeout": TaskTimeout,
                             "crash": RuntimeUnknownError}.get(info.kind, RuntimeSystemError)
    return cls(info)


class RunCancelled(ShoalError):
    """The run was cancelled before it finished."""


class ShoalSystemError(ShoalError):
    """Shoal or its infrastructure failed; not the user's code."""


class StoreError(ShoalSystemError, OSError):
    """The object store failed."""


class ObjectNotFound(StoreError, FileNotFoundError):
    """No object at that URI."""


class EngineError(ShoalSystemError):
    """The engine could not start, reach or control a process."""
