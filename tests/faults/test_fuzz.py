"""Property-based fuzzing (Hypothesis) of what users and the store hand Shoal: every public
constructor, the input/output codecs, a task's command-line arguments, and the Kubernetes
compiler. Any input gives a valid object or a Shoal error, never an internal exception; a valid
spec compiles to manifests that pass the strict schemas.

Each property runs a few examples so the file takes seconds; SHOAL_FUZZ_PROFILE=deep (the name
lives in Hypothesis' settings, not in Shoal's contract: it is a test knob) runs a hundred times
more, e.g. ``SHOAL_FUZZ_PROFILE=deep pytest tests/faults/test_fuzz.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import inspect
import math
import os
import typing
import warnings
from collections.abc import Callable
from typing import Any, Literal

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="pip install hypothesis (the dev extra)")
from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import shoal  # noqa: E402
from shoal._storage import codecs  # noqa: E402
from shoal.clustered import (  # noqa: E402
    ClusteredTaskEnvironment,
    ClusterFailurePolicy,
    JaxRun,
    TorchRun,
)
from shoal.errors import ShoalError  # noqa: E402

pytestmark = pytest.mark.faults

# --- wild values: what a user may pass where Shoal expects something else -----------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["", "0", "-1", "1.5", "4Gi", "H200:8", "auto", "../x", "/abs", "a b",
                     "A100:0", "1e400", "nan", "2Ti", "100m", "x" * 300, "none", "static",
                     "c10d", "torch", "all", "0,3", "gpu:8", "1Mi", "-4Gi", "5", "\x00"]),
    st.binary(max_size=6), st.timedeltas(max_value=dt.timedelta(days=3),
                                         min_value=dt.timedelta(days=-1)),
    st.builds(object),
)
wild = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner),
    st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=3),
    st.frozensets(st.integers(), max_size=2)), max_leaves=6)

NAMES = st.one_of(st.from_regex(r"[a-z][a-z0-9_-]{0,20}", fullmatch=True), st.text(max_size=20))


def _fuzzes(call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """``call(*args, **kwargs)`` returns, or raises a Shoal error (never an internal one)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a note (UserWarning) is an answer too
        with contextlib.suppress(ShoalError):
            call(*args, **kwargs)


def _kwargs(func: Callable[..., Any], plausible: dict[str, st.SearchStrategy[Any]],
            skip: frozenset[str] = frozenset()) -> st.SearchStrategy[dict[str, Any]]:
    """Some of ``func``'s keyword parameters, each a wild or a plausible value."""
    params = [p for n, p in inspect.signature(func).parameters.items()
              if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and n not in skip
              and n != "self"]
    fields = {p.name: st.one_of(wild, plausible[p.name]) if p.name in plausible else wild
              for p in params}
    required = {p.name for p in params if p.default is p.empty}
    return st.fixed_dictionaries({n: fields[n] for n in required},
                                 optional={n: f for n, f in fields.items() if n not in required})


QUANTITY = st.one_of(st.integers(0, 64), st.floats(0, 64), st.sampled_from(
    ["1", "500m", "4Gi", "8G", "1.5Gi", "lots", "0", "16Mi"]))
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "cpu": st.one_of(QUANTITY, st.tuples(QUANTITY, QUANTITY)),
    "memory": st.one_of(QUANTITY, st.tuples(QUANTITY, QUANTITY)),
    "disk": QUANTITY, "shm": st.one_of(QUANTITY, st.just("auto")),
    "gpu": st.one_of(st.integers(0, 16), st.sampled_from(["H200:8", "A100:2", "T4", "H200:x"]),
                     st.builds(lambda n: shoal.GPU("H100", n), st.integers(1, 9))),
    "labels": st.dictionaries(st.sampled_from(["app", "kueue.x-k8s.io/queue-name", "Bad Key",
                                               "a/b/c", "team"]), wild, max_size=3),
    "annotations": st.dictionaries(st.text(max_size=10), wild, max_size=2),
    "pod_spec": st.one_of(st.just({"containers": [{"name": "primary"}]}),
                          st.dictionaries(st.text(max_size=6), wild, max_size=2)),
    "replicas": st.integers(-2, 16), "nproc_per_node": st.integers(-1, 16),
    "max_restarts": st.integers(-2, 5), "count": st.integers(-2, 5),
    "collective_timeout": st.floats(-1, 1e6), "grace_period": st.floats(-1, 100),
    "key": NAMES, "group": st.one_of(st.none(), NAMES), "as_env_var": NAMES,
    "mount": st.sampled_from(["/etc/flyte/secrets", "relative", "/", None]),
    "ranks": st.one_of(st.sampled_from(["all", "0", "0,3", "x"]),
                       st.lists(st.integers(-1, 8), max_size=3)),
    "steps": st.tuples(st.integers(-1, 10), st.integers(-1, 10)),
    "seconds": st.tuples(st.floats(-1, 10), st.floats(-1, 10)),
    "tool": st.sampled_from(["torch", "nsys", "py-spy", "jax", "bogus"]),
    "behavior": st.sampled_from(["auto", "override", "disable", "enable", "bogus"]),
    "ignored_inputs": st.one_of(st.text(max_size=5), st.lists(st.text(max_size=5))),
    "python_version": st.one_of(st.sampled_from(["3.11", "3.12", "2.7", "3"]),
                                st.tuples(st.integers(2, 4), st.integers(0, 14))),
    "rdzv_backend": st.sampled_from(["static", "c10d", "etcd"]),
    "idle_ttl": st.floats(-1, 1e4), "scaledown_ttl": st.floats(-1, 1e4),
    "concurrency": st.integers(-1, 8), "scope": st.sampled_from(["global", "run", "x"]),
}
CONSTRUCTORS: dict[str, Callable[..., Any]] = {
    "Resources": shoal.Resources, "PodTemplate": shoal.PodTemplate, "Cache": shoal.Cache,
    "ReusePolicy": shoal.ReusePolicy, "Secret": shoal.Secret, "Timeout": shoal.Timeout,
    "RetryStrategy": shoal.RetryStrategy, "Backoff": shoal.Backoff,
    "ClusterFailurePolicy": ClusterFailurePolicy, "TorchRun": TorchRun, "JaxRun": JaxRun,
    "Profile": shoal.Profile, "Image.from_debian_base": shoal.Image.from_debian_base,
    "Image.from_base": shoal.Image.from_base,
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
@given(data=st.data())
def test_a_public_constructor_gives_an_object_or_a_shoal_error(name: str, data: Any) -> None:
    ctor = CONSTRUCTORS[name]
    _fuzzes(ctor, (), data.draw(_kwargs(ctor, PLAUSIBLE)))


ENV_PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "resources": st.builds(shoal.Resources, cpu=st.integers(1, 8), memory=st.just("1Gi")),
    "env_vars": st.dictionaries(st.text(max_size=8), wild, max_size=3),
    "secrets": st.one_of(NAMES, st.lists(NAMES, max_size=2),
                         st.builds(shoal.Secret, key=st.just("tok"))),
    "cache": st.sampled_from(["auto", "disable", "override", shoal.Cache("auto", version="1")]),
    "depends_on": st.lists(st.builds(object), max_size=1),
    "interruptible": st.booleans(), "queue": NAMES, "description": st.text(max_size=10),
    "pod_template": st.builds(shoal.PodTemplate, labels=st.just({"app": "x"})),
    "reusable": st.builds(shoal.ReusePolicy, replicas=st.integers(1, 3)),
    "profile": st.builds(shoal.Profile), "image": st.sampled_from(
        [shoal.Image.from_debian_base(), "ghcr.io/x/y:1", "auto", "", 3]),
    **PLAUSIBLE,
}


@given(name=NAMES, data=st.data())
def test_a_task_environment_gives_an_object_or_a_shoal_error(name: Any, data: Any) -> None:
    _fuzzes(shoal.TaskEnvironment, (name,), data.draw(_kwargs(
        shoal.TaskEnvironment, ENV_PLAUSIBLE, skip=frozenset({"name", "plugin_config"}))))


@given(name=NAMES, data=st.data(), runtime=st.one_of(
    wild, st.builds(TorchRun), st.builds(JaxRun)), policy=st.one_of(
    wild, st.builds(ClusterFailurePolicy, max_restarts=st.integers(0, 3))))
def test_a_clustered_environment_gives_an_object_or_a_shoal_error(
        name: Any, data: Any, runtime: Any, policy: Any) -> None:
    kwargs = data.draw(_kwargs(ClusteredTaskEnvironment, PLAUSIBLE,
                               skip=frozenset({"name", "runtime", "failure_policy"})))
    if data.draw(st.booleans()):
        kwargs["resources"] = shoal.Resources(gpu=data.draw(st.integers(0, 8)))
    _fuzzes(ClusteredTaskEnvironment, (name,),
            {**kwargs, "runtime": runtime, "failure_policy": policy})


BUILDERS = ["with_pip_packages", "with_apt_packages", "with_commands", "with_workdir",
            "with_env_vars", "with_source_file", "with_source_folder", "with_requirements"]


@given(steps=st.lists(st.tuples(st.sampled_from(BUILDERS), st.lists(wild, max_size=3),
                                st.dictionaries(st.sampled_from(
                                    ["index_url", "pre", "dst", "copy_contents_only",
                                     "extra_index_urls"]), wild, max_size=2)), max_size=4))
def test_image_builders_give_an_image_or_a_shoal_error(steps: Any) -> None:
    image = shoal.Image.from_debian_base()
    for method, args, kwargs in steps:
        builder = getattr(image, method)
        try:
            inspect.signature(builder).bind(*args, **kwargs)
        except TypeError:  # arguments the method does not take: Python's own check
            continue
        try:
            image = builder(*args, **kwargs)
        except ShoalError:
            continue
    # Sources are read when the image renders (its tag hashes them): a missing one is a
    # SpecError there.
    with contextlib.suppress(ShoalError):
        assert image.dockerfile and image.tag


# --- codecs: a round trip or a Shoal error --------------------------------------------------------

class Color(enum.Enum):
    RED = "red"
    BLUE = 2


@dataclasses.dataclass
class Point:
    x: int
    label: str
    tags: list[str]
    near: Point | None = None


TYPES: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (int, st.integers()), (float, st.floats(allow_nan=False)), (str, st.text()),
    (bool, st.booleans()), (bytes, st.binary()), (type(None), st.none()),
    (list[int], st.lists(st.integers())), (dict[str, float], st.dictionaries(
        st.text(), st.floats(allow_nan=False))), (dict[int, str], st.dictionaries(
            st.integers(), st.text())), (tuple[int, str], st.tuples(st.integers(), st.text())),
    (tuple[int, ...], st.lists(st.integers()).map(tuple)), (int | None,
                                                            st.one_of(st.none(), st.integers())),
    (int | str, st.one_of(st.integers(), st.text())), (Literal["a", 3], st.sampled_from(["a", 3])),
    (Color, st.sampled_from(Color)), (dt.datetime, st.datetimes()), (dt.date, st.dates()),
    (dt.timedelta, st.timedeltas()), (set[int], st.sets(st.integers())),
    (Point, st.builds(Point, x=st.integers(), label=st.text(), tags=st.lists(st.text()),
                      near=st.none() | st.builds(Point, x=st.integers(), label=st.text(),
                                                 tags=st.lists(st.text())))),
    (dict[str, Any], st.dictionaries(st.text(), st.recursive(
        st.none() | st.booleans() | st.integers() | st.text()
        | st.floats(allow_nan=False, allow_infinity=False),
        lambda i: st.lists(i) | st.dictionaries(st.text(), i), max_leaves=6))),
]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(a == b) and type(a) is type(b)


@pytest.mark.parametrize("tp, values", TYPES, ids=[str(t) for t, _ in TYPES])
@given(data=st.data())
def test_a_value_round_trips_through_its_codec(tp: Any, values: Any, data: Any) -> None:
    value = data.draw(values)
    literal = codecs.encode(value, tp, blobs=None, field="output of task 't'")
    assert _same(codecs.decode(literal, tp, blobs=None, field="output of task 't'"), value)


@pytest.mark.parametrize("tp", [t for t, _ in TYPES] + [list[Point], Point | None],
                         ids=[str(t) for t, _ in TYPES] + ["list[Point]", "Point|None"])
@given(value=wild)
def test_a_wrong_value_or_literal_gives_a_shoal_error(tp: Any, value: Any) -> None:
    _fuzzes(codecs.encode, (value, tp), {"blobs": None, "field": "input 'x' of task 't'"})
    _fuzzes(codecs.decode, (value, tp), {"blobs": None, "field": "input 'x' of task 't'"})


# --- a task's command-line arguments --------------------------------------------------------------

_cli_env = shoal.TaskEnvironment("fuzz-cli")


@_cli_env.task
def cli_task(n: int, rate: float, name: str, flag: bool, color: Color, mode: Literal["a", "b"],
             point: Point, sizes: list[int], maybe: int | None = None,
             data: shoal.File | None = None) -> int:
    return n


FLAGS = ["--n", "--rate", "--name", "--flag", "--color", "--mode", "--point", "--sizes",
         "--maybe", "--data", "--bogus", "-h", "--", "--n="]


@given(argv=st.lists(st.one_of(st.sampled_from(FLAGS), st.text(max_size=12), st.sampled_from(
    ['{"x": 1, "label": "a", "tags": []}', "[1, 2]", "true", "RED", "2", "1e309", "nan",
     "s3://bucket/key", "[" * 5000, '{"x": "1"}', "9" * 5000])), max_size=12))
@example(argv=["--n", "1", "--rate", "0.5", "--name", "x", "--flag", "on", "--color", "red",
               "--mode", "a", "--point", '{"x": 1, "label": "a", "tags": []}', "--sizes",
               "[1]"])
@example(argv=["--point", "[" * 100000])
def test_task_arguments_parse_or_give_a_shoal_error(argv: list[str]) -> None:
    from shoal.cli.args import parse_task_args

    try:
        parse_task_args(cli_task, argv)
    except ShoalError:
        pass
    except SystemExit as e:  # -h: argparse printed the help
        assert e.code == 0 and ("-h" in argv or "--help" in argv)


# --- the Kubernetes compiler ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Spec:
    clustered: bool
    replicas: int
    nproc: int
    gpus: int
    cpu: int
    memory: str
    labels: dict[str, str]
    env_vars: dict[str, str]
    max_restarts: int
    interruptible: bool


valid_specs = st.builds(
    _Spec, clustered=st.booleans(), replicas=st.integers(1, 6), nproc=st.integers(1, 8),
    gpus=st.integers(0, 8), cpu=st.integers(1, 96), memory=st.sampled_from(
        ["512Mi", "4Gi", "64Gi", "1Ti"]),
    labels=st.dictionaries(st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True),
                           st.from_regex(r"[a-z0-9]{0,10}", fullmatch=True), max_size=3),
    env_vars=st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True).filter(
        lambda n: not n.startswith("SHOAL_")), st.text(max_size=20), max_size=3),
    max_restarts=st.integers(0, 4), interruptible=st.booleans())


def _task_of(spec: _Spec, n: int) -> Any:
    from shoal._spec.secret_names import looks_secret

    kw: dict[str, Any] = {
        "resources": shoal.Resources(cpu=spec.cpu, memory=spec.memory,
                                     gpu=f"H200:{spec.gpus}" if spec.gpus else None),
        "env_vars": {k: v for k, v in spec.env_vars.items() if not looks_secret(k)},
        "pod_template": shoal.PodTemplate(labels=spec.labels) if spec.labels else None,
        "interruptible": spec.interruptible,
    }
    nproc = min(spec.nproc, spec.gpus) if spec.gpus else spec.nproc
    env = ClusteredTaskEnvironment(
        f"fuzz-k8s-{n}", replicas=spec.replicas, nproc_per_node=nproc,
        failure_policy=ClusterFailurePolicy(max_restarts=spec.max_restarts), **kw) \
        if spec.clustered else shoal.TaskEnvironment(f"fuzz-k8s-{n}", **kw)

    @env.task
    def work(x: int) -> int:
        return x

    return work


_count = iter(range(10**9))


@settings(max_examples=int(settings().max_examples * 0.6) or 1)
@given(spec=valid_specs)
def test_every_valid_spec_compiles_to_manifests_that_pass_the_strict_schemas(spec: _Spec) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    from shoal._engines.kubernetes import compile_call
    from tests.kubernetes.conftest import CODE as BUNDLE
    from tests.kubernetes.conftest import CONFIG as KUBE
    from tests.kubernetes.conftest import JOBSET_CRD, RUN, call_of
    from tests.kubernetes.test_schemas import jobset_validator, schema_errors

    objects = compile_call(call_of(_task_of(spec, next(_count))), run=RUN, action="a0.1",
                           attempt=0, config=KUBE, code=BUNDLE)
    for obj in objects:
        if obj["kind"] == "JobSet":
            if JOBSET_CRD.exists():
                assert schema_errors(jobset_validator(), obj) == []
            jobs = [{"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": f"{obj['metadata']['name']}-{rj['name']}-0"},
                     **rj["template"]} for rj in obj["spec"]["replicatedJobs"]]
        else:
            jobs = [obj]
        for job in jobs:
            kv.validate(job, kv.latest_version(), strict=True)


def test_the_fuzz_profile_is_small_by_default() -> None:
    if os.environ.get("SHOAL_FUZZ_PROFILE"):
        pytest.skip("a profile was chosen")
    assert settings().max_examples <= 25 and settings().deadline is None
    assert typing.get_args(Literal["a", 3]) == ("a", 3)
