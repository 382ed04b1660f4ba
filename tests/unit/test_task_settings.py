"""Flyte 2's parameters of TaskEnvironment and @env.task: each is honoured (and lands on the
spec) or refused with a SpecError that names what to do instead; the value types RetryStrategy,
Backoff, Timeout, Secret and ReusePolicy check what they hold; the Kubernetes compile of
secrets; the local lookup of a secret."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import shoal
from shoal._engines.host_secrets import SecretMissing, lookup
from shoal._spec.call import BackoffSpec, ReuseSpec, SecretSpec
from shoal.errors import SpecError

env = shoal.TaskEnvironment("settings")


def _task(**kw: object) -> shoal.TaskTemplate:  # type: ignore[type-arg]
    def f(x: int) -> int:
        """Adds one to x."""
        return x + 1
    return env.task(**kw)(f)  # type: ignore[arg-type]


def test_honoured_settings_land_on_the_spec() -> None:
    pt = shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "team-a"})
    spec = _task(short_name="Add one", entrypoint=True, links=("https://wandb.ai/x",),
                 interruptible=True, pod_template=pt, max_inline_io_bytes=1 << 20).spec()
    assert spec.name == "settings.f"  # short_name is shown, never how the task is found
    assert (spec.display_name, spec.entrypoint, spec.links) == ("Add one", True,
                                                                ("https://wandb.ai/x",))
    assert spec.docs == "Adds one to x."  # from the docstring by default
    assert spec.env.interruptible is True and spec.env.pod_template is pt
    assert env.spec().interruptible is False  # the environment keeps its own
    assert _task(docs="Explicit.").spec().docs == "Explicit."

    class Documentation:
        description = "Flyte's kind."
    assert _task(docs=Documentation()).spec().docs == "Flyte's kind."


def test_retry_strategy_and_backoff() -> None:
    spec = _task(retries=shoal.RetryStrategy(count=4, backoff=shoal.Backoff(
        base=timedelta(seconds=10), factor=2.0, cap=timedelta(seconds=25)))).spec()
    assert spec.retries == 4 and spec.backoff == BackoffSpec(10.0, 2.0, 25.0)
    assert [spec.backoff.delay(n) for n in range(3)] == [10.0, 20.0, 25.0]
    assert _task(retries=3).spec().backoff is None  # the engine's default pacing
    with pytest.raises(SpecError, match=r"cap.*is required when factor > 1"):
        shoal.Backoff(base=1, factor=2)
    with pytest.raises(SpecError, match="must be a finite number >= 1"):
        shoal.Backoff(base=1, factor=0.5)
    with pytest.raises(SpecError, match="number of seconds >= 0"):
        shoal.Backoff(base=-1)
    with pytest.raises(SpecError, match=r"RetryStrategy.count"):
        shoal.RetryStrategy(count=-1)
    with pytest.raises(SpecError, match=r"must be an int >= 0 or shoal.RetryStrategy"):
        _task(retries="3")


def test_timeout_forms() -> None:
    assert _task(timeout=shoal.Timeout(max_runtime=timedelta(minutes=2), max_queued_time=5)
                 ).spec().timeout == 120.0
    assert _task(timeout=shoal.Timeout(max_queued_time=5)).spec().max_queued_time == 5.0
    assert _task(timeout=0).spec().timeout is None  # Flyte's default: no bound
    assert _task(timeout=timedelta(seconds=30)).spec().timeout == 30.0
    bounded = _task(timeout=shoal.Timeout(max_runtime=60, deadline=timedelta(hours=1))).spec()
    assert (bounded.timeout, bounded.deadline) == (60.0, 3600.0)
    assert _task(timeout=shoal.Timeout(deadline=0)).spec().deadline is None  # no bound
    assert _task(timeout=600).spec().deadline is None
    with pytest.raises(SpecError, match=r"Timeout.deadline"):
        shoal.Timeout(deadline=-1)
    with pytest.raises(SpecError, match=r"seconds, a timedelta or shoal.Timeout"):
        _task(timeout="10m")


@pytest.mark.parametrize(("kw", "message"), [
    ({"queue": 3}, "non-empty string"),
    ({"queue": "b", "pod_template": shoal.PodTemplate(
        labels={"kueue.x-k8s.io/queue-name": "a"})}, "differs from the pod template"),
    ({"triggers": (object(),)}, "no scheduler.*cron"),
    ({"task_resolver": object()}, "custom resolver cannot apply"),
    ({"produces_artifacts": True}, "artifacts"),
    ({"short_name": ""}, "non-empty string"),
    ({"docs": 3}, "description"),
    ({"pod_template": {"labels": {}}}, "shoal.PodTemplate"),
    ({"interruptible": "yes"}, "bool or None"),
    ({"entrypoint": "yes"}, "must be a bool"),
    ({"max_inline_io_bytes": 0}, "positive int"),
    ({"links": (3,)}, "link with a .name"),
])
def test_task_parameters_refused_or_checked(kw: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        _task(**kw)


@pytest.mark.parametrize(("kw", "message"), [
    ({"queue": ""}, "non-empty string"),
    ({"plugin_config": object()}, "ClusteredTaskEnvironment"),
    ({"reusable": True}, "shoal.ReusePolicy"),
    ({"secrets": [3]}, "secret key or a shoal.Secret"),
    ({"secrets": ["a/b"]}, "secret key or a shoal.Secret"),
])
def test_environment_parameters_refused_or_checked(kw: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        shoal.TaskEnvironment("refused", **kw)  # type: ignore[arg-type]


def test_secret_values_and_defaults() -> None:
    specs = shoal.TaskEnvironment("sec", secrets=[
        "WANDB_API_KEY", "my-secret", shoal.Secret("k", group="g"),
        shoal.Secret("openai", as_env_var="OPENAI_API_KEY"),
        shoal.Secret("f", mount="/etc/flyte/secrets")]).spec().secrets
    assert [s.env_var for s in specs] == ["WANDB_API_KEY", "MY_SECRET", "G_K", "OPENAI_API_KEY",
                                          None]  # Flyte's rules for the variable's name
    assert specs[-1].mount == "/etc/flyte/secrets"
    with pytest.raises(SpecError, match=r"Secret.as_env_var"):
        shoal.Secret("k", as_env_var="1BAD")
    with pytest.raises(SpecError, match=r"Secret.group"):
        shoal.Secret("k", group="a/b")
    with pytest.raises(SpecError, match="absolute path"):
        shoal.Secret("k", mount="relative")


def test_local_secret_lookup_order(tmp_path: Path) -> None:
    s = SecretSpec(key="api-key", group="team", env_var="TEAM_TOKEN")
    (tmp_path / "secrets" / "team").mkdir(parents=True)
    (tmp_path / "secrets" / "team" / "api-key").write_text("from-file\n")
    assert lookup(s, {"TEAM_TOKEN": "a", "API_KEY": "b"}, tmp_path) == "a"
    assert lookup(s, {"API_KEY": "b"}, tmp_path) == "b"
    assert lookup(s, {}, tmp_path) == "from-file"
    with pytest.raises(SecretMissing, match=r"'other'.*\$OTHER.*secrets/other"):
        lookup(SecretSpec(key="other", env_var="OTHER"), {}, tmp_path)


def test_reuse_policy() -> None:
    spec = shoal.TaskEnvironment("warm", reusable=shoal.ReusePolicy(
        replicas=(1, 4), idle_ttl=timedelta(minutes=5))).spec()
    assert spec.reuse == ReuseSpec(max_workers=4, idle_ttl=300.0)
    with pytest.warns(UserWarning, match=r"up to 6 warm workers"):
        served = shoal.ReusePolicy(replicas=3, concurrency=2)
    assert served.max_workers() == 6  # a call per process, the same calls at once
    with pytest.raises(SpecError, match="concurrency"):
        shoal.ReusePolicy(concurrency=0)
    with pytest.raises(SpecError, match="replicas"):
        shoal.ReusePolicy(replicas=(3, 1))
    with pytest.raises(SpecError, match="idle_ttl"):
        shoal.ReusePolicy(idle_ttl=0)


def test_override_takes_the_new_forms() -> None:
    t = _task()
    over = t.override(retries=shoal.RetryStrategy(count=2, backoff=shoal.Backoff(base=1)),
                      timeout=shoal.Timeout(max_runtime=9), secrets=shoal.Secret("x-y"))
    spec = over.spec()
    assert (spec.retries, spec.backoff, spec.timeout) == (2, BackoffSpec(1.0), 9.0)
    assert [s.env_var for s in spec.env.secrets] == ["X_Y"]


def test_override_short_name_and_reusable() -> None:
    t = _task()
    spec = t.override(short_name="shown", reusable="off").spec()
    assert spec.name == t.name and spec.display_name == "shown"
    assert spec.env.reuse == ReuseSpec(max_workers=0, idle_ttl=1.0)  # a fresh process per call
    policy = shoal.ReusePolicy(replicas=3, idle_ttl=60)
    assert t.override(reusable=policy).spec().env.reuse == ReuseSpec(3, 60.0)


def test_clone_with_keeps_all_but_the_changes() -> None:
    base = shoal.TaskEnvironment("clone-base", env_vars={"A": "1"}, secrets="TOKEN",
                                 reusable=shoal.ReusePolicy(replicas=2, idle_ttl=60))
    clone = base.clone_with("clone-two", reusable=None, depends_on=[base])
    assert clone.name == "clone-two" and dict(clone.env_vars) == {"A": "1"}
    assert clone.reusable is None and clone.depends_on == (base,) and clone.tasks == {}
    assert [s.env_var for s in clone.spec().secrets] == ["TOKEN"]
    with pytest.raises(SpecError, match="is not a setting of TaskEnvironment"):
        base.clone_with("clone-three", replicas=2)


def test_clone_with_a_clustered_environment_keeps_its_shape() -> None:
    from shoal.clustered import ClusteredTaskEnvironment

    gang = ClusteredTaskEnvironment("gang-base", replicas=2, nproc_per_node=2)
    clone = gang.clone_with("gang-wide", replicas=4)
    assert isinstance(clone, ClusteredTaskEnvironment)
    assert (clone.replicas, clone.nproc_per_node) == (4, 2)


def test_queue_is_the_kueue_queue_label() -> None:
    queued = shoal.TaskEnvironment("queued", queue="bulk-a", pod_template=shoal.PodTemplate(
        labels={"team": "x"}, pod_spec={"nodeSelector": {"a": "b"}}))
    assert queued.pod_template.labels == {"team": "x", "kueue.x-k8s.io/queue-name": "bulk-a"}
    assert queued.pod_template.pod_spec == {"nodeSelector": {"a": "b"}}
    t = _task(queue="serial-1")
    assert t.spec().env.pod_template.queue_name == "serial-1"
    assert env.pod_template is None  # the environment keeps its own
    assert t.override(queue="other").spec().env.pod_template.queue_name == "other"


def test_a_clustered_environment_refuses_reuse() -> None:
    from shoal.clustered import ClusteredTaskEnvironment

    with pytest.raises(SpecError, match="never reused"):
        ClusteredTaskEnvironment("gang-reused", replicas=2, reusable=shoal.ReusePolicy())
