"""Secrets and untrusted values in environment variables (issue 22, findings 3 and 7).

A secret is recognised by its name's words and by its value's look (a token format, a URL with
a password, a long random string): it reaches the task but no dry-run plan, Slurm script,
Kubernetes manifest, Dockerfile or error message. A value Shoal cannot pass on (a NUL byte) is
refused when the environment is built, as one line naming the field, and any other value —
newlines, quotes, ``$(...)`` — is rendered so that it stays a value: the sbatch script keeps
its ``#SBATCH`` directives, the manifests their keys, the plan its lines.

Hypothesis runs with the profiles of tests/faults/test_fuzz.py (SHOAL_FUZZ_PROFILE=deep for a
hundred times more examples).
"""

from __future__ import annotations

import dataclasses
import os
import string
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="pip install hypothesis (the dev extra)")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import shoal  # noqa: E402
from shoal._engines.kubernetes import compile_call  # noqa: E402
from shoal._engines.kubernetes.manifests import to_yaml  # noqa: E402
from shoal._engines.local.plan import plan_process  # noqa: E402
from shoal._engines.local.pool import Request  # noqa: E402
from shoal._engines.slurm.script import secret_env_vars  # noqa: E402
from shoal._spec.call import CallSpec, EnvSpec, frozen_map  # noqa: E402
from shoal._spec.secret_names import is_secret  # noqa: E402
from shoal.clustered import ClusteredTaskEnvironment  # noqa: E402
from shoal.errors import SpecError  # noqa: E402
from tests.kubernetes import seed_program  # noqa: E402
from tests.kubernetes.conftest import CODE, CONFIG, RUN  # noqa: E402
from tests.unit import test_slurm_script as slurm  # noqa: E402
from tests.unit.test_local_plan import WENV  # noqa: E402

pytestmark = pytest.mark.faults

# The three, each missed on main (names outside *TOKEN*/*SECRET*/*PASSWORD*/*_KEY).
FINDING_3 = {
    "OPENAI_APIKEY": "sk-proj-4fJq8ZxL2mN7pR1sT9vW3yB6cD0eG5hK",
    "DB_PASSWD": "hunter2-correct-horse",
    "DATABASE_URL": "postgres://user:password@host/db",
}
PLAIN = {"MODEL": "meta-llama/Llama-3.1-8B", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
         "TOKENIZERS_PARALLELISM": "false"}


# --- the renderers, each fed an environment's variables ---------------------------------------

def _with_env_vars(spec: Any, env_vars: dict[str, str]) -> CallSpec:
    env: EnvSpec = dataclasses.replace(spec.env, env_vars=frozen_map(env_vars))
    return CallSpec(task=dataclasses.replace(spec, env=env), inputs={}, parent_action="a0")


def dry_run_plan(env_vars: dict[str, str]) -> str:
    env = dataclasses.replace(seed_program.prepare.spec().env, env_vars=frozen_map(env_vars))
    plan = plan_process(env, capacity=Request(64, 2**40, 0), wenv=WENV, base={},
                        priorities={})
    return plan.render(base={})


def slurm_scripts(tmp: Path, env_vars: dict[str, str]) -> dict[str, str]:
    """The sbatch scripts of a plain task and of a gang."""
    out = {}
    for task in ("prepare", "train"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[task] = slurm.script(tmp, task, env_vars=frozen_map(env_vars))
    return out


def k8s_manifests(env_vars: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """The Job of a plain task and the JobSet of a gang."""
    out = {}
    for name, task in (("job", seed_program.prepare), ("jobset", seed_program.train)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = compile_call(_with_env_vars(task.spec(), env_vars), run=RUN,
                                     action="a0.1", attempt=0, config=CONFIG, code=CODE)
    return out


def _env_values(manifests: list[dict[str, Any]]) -> dict[str, str]:
    found: dict[str, str] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("env"), list):
                found.update({e["name"]: e["value"] for e in node["env"] if "value" in e})
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(manifests)
    return found


# --- finding 3: secrets known by their names only ---------------------------------------------

SHOAL_PROGRAM = '''
import shoal

env = shoal.TaskEnvironment("leaky", env_vars={env_vars!r})


@env.task
def main(n: int) -> int:
    return n
'''


def _shoal_run(tmp_path: Path, env_vars: str, *args: str) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "leaky.py"
    program.write_text(SHOAL_PROGRAM.replace("{env_vars!r}", env_vars))
    env = {**os.environ, "SHOAL_HOME": str(tmp_path / "home"),
           "SHOAL_STORE": (tmp_path / "store").as_uri()}
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", *args, str(program),
                           "main", "--n", "1"], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)


def test_finding_3_a_dry_run_shows_no_secret_known_by_its_word_or_look(tmp_path: Path) -> None:
    env_vars = {**FINDING_3, **PLAIN, "FALSE_ALARM_KEY": "shown-as-is"}
    text = repr(env_vars).replace("'shown-as-is'", "shoal.NotSecret('shown-as-is')")
    done = _shoal_run(tmp_path, text, "--dry-run")
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    for name, value in FINDING_3.items():
        assert value not in out, name
        assert f"{name}=<redacted>" in done.stdout, name
    for name, value in PLAIN.items():
        assert f"{name}={value}" in done.stdout
    assert "FALSE_ALARM_KEY=shown-as-is" in done.stdout  # marked shoal.NotSecret


@pytest.mark.parametrize("name", sorted(FINDING_3))
def test_finding_3_kubernetes_refuses_the_value_and_points_at_shoal_secret(name: str) -> None:
    for kind in ("job", "jobset"):
        with pytest.raises(SpecError, match=r"shoal\.Secret") as e:
            k8s_manifests({name: FINDING_3[name], **PLAIN})
        assert FINDING_3[name] not in str(e.value), kind
        assert f"env_vars[{name!r}]" in e.value.field and "NotSecret" in str(e.value)
    marked = k8s_manifests({name: shoal.NotSecret(FINDING_3[name]), **PLAIN})
    for objects in marked.values():
        assert _env_values(objects)[name] == FINDING_3[name]  # the way out of a false alarm
        to_yaml(objects)  # a NotSecret (a str subclass) does not break the YAML dumper


def test_finding_3_a_slurm_script_leaves_every_secret_to_sbatchs_environment(
        tmp_path: Path) -> None:
    for task, text in slurm_scripts(tmp_path, {**FINDING_3, **PLAIN}).items():
        for name, value in FINDING_3.items():
            assert value not in text, (task, name)
            assert f"# {name}: from the environment sbatch was started with" in text
        assert f"export MODEL={PLAIN['MODEL']}" in text
    env = _with_env_vars(seed_program.prepare.spec(), {**FINDING_3, **PLAIN}).task.env
    assert secret_env_vars(env) == FINDING_3  # the job still gets them, through sbatch


def test_an_image_refuses_a_secret_env_var_and_takes_a_marked_one() -> None:
    base = shoal.Image.from_debian_base()
    for name, value in FINDING_3.items():
        with pytest.raises(SpecError, match=r"shoal\.Secret") as e:
            base.with_env_vars({name: value})
        assert value not in str(e.value)
    image = base.with_env_vars({"DB_PASSWD": shoal.NotSecret("not-a-secret")})
    assert 'ENV DB_PASSWD="not-a-secret"' in image.dockerfile()


# --- finding 7: a NUL byte in a value, and names that are no variable names ---------------------

def test_finding_7_a_nul_byte_is_one_line_and_exit_2_before_anything_runs(
        tmp_path: Path) -> None:
    done = _shoal_run(tmp_path, repr({"X": "a\x00b"}))
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "env_vars['X']" in lines[0] and "NUL" in lines[0] and "Fix:" in lines[0]
    assert not (tmp_path / "home" / "runs").exists() or not any(
        (tmp_path / "home" / "runs").iterdir())


def test_finding_7_a_secret_with_a_nul_byte_is_refused_without_being_shown(
        tmp_path: Path) -> None:
    done = _shoal_run(tmp_path, repr({"DB_PASSWD": "hunter2\x00x"}))
    assert done.returncode == 2 and "hunter2" not in done.stderr, done.stderr
    assert "env_vars['DB_PASSWD']='<redacted>'" in done.stderr


def _task() -> Any:
    env = shoal.TaskEnvironment("nul-env")

    @env.task
    def work() -> int:
        raise NotImplementedError

    return work


@pytest.mark.parametrize("build", [
    lambda v: shoal.TaskEnvironment("nul-env", env_vars=v),
    lambda v: ClusteredTaskEnvironment("nul-gang", replicas=2, nproc_per_node=1, env_vars=v),
    lambda v: _task().override(env_vars=v),
    lambda v: shoal.with_runcontext(env_vars=v),
    lambda v: shoal.Image.from_debian_base().with_env_vars(v),
], ids=["TaskEnvironment", "ClusteredTaskEnvironment", "override", "with_runcontext", "Image"])
def test_finding_7_every_way_in_refuses_a_nul_byte_and_a_bad_name(build: Any) -> None:
    with pytest.raises(SpecError, match="NUL") as e:
        build({"X": "a\x00b"})
    assert "X" in e.value.field
    for bad in ("A=B", "A\x00", "1X", "", "A B", "A-B"):
        with pytest.raises(SpecError, match=r"\[A-Za-z_\]"):
            build({bad: "1"})


# --- Hypothesis: credentials never reach an output; any value stays a value -------------------

_ALNUM = string.ascii_letters + string.digits


def _body(n: int, alphabet: str = _ALNUM) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=n, max_size=n + 24)


_credential = st.one_of(
    st.builds(lambda b: "sk-proj-" + b, _body(24, _ALNUM + "_-")),
    st.builds(lambda p, b: p + b, st.sampled_from(["ghp_", "gho_", "ghs_", "github_pat_"]),
              _body(36)),
    st.builds(lambda b: "xoxb-" + b, _body(24, _ALNUM + "-")),
    st.builds(lambda p, b: p + b, st.sampled_from(["AKIA", "ASIA"]),
              st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16)),
    st.builds(lambda b: "hf_" + b, _body(34)),
    st.builds(lambda b: "glpat-" + b, _body(20)),
    st.builds(lambda b: "AIza" + b, st.text(_ALNUM + "_-", min_size=35, max_size=35)),
    st.builds(lambda a, b, c: f"eyJ{a}.eyJ{b}.{c}", _body(12), _body(12), _body(20)),
    st.builds(lambda k: f"-----BEGIN {k}PRIVATE KEY-----\nMIIE\n-----END {k}PRIVATE KEY-----",
              st.sampled_from(["", "RSA ", "EC ", "OPENSSH "])),
    st.builds(lambda s, u, p, h: f"{s}://{u}:{p}@{h}/db",
              st.sampled_from(["postgres", "mysql", "redis", "https", "amqp"]),
              st.text(_ALNUM, max_size=8), _body(6, _ALNUM + "!*~"),
              st.sampled_from(["db", "10.0.0.5:5432", "host.example.com"])),
)
# A credential inside a longer value: after a scheme word, in a comma list.
_in_context = st.builds(lambda pre, c: pre + c, st.sampled_from(["", "Bearer ", "a,", "x "]),
                        _credential)
_plain_name = st.from_regex(r"[A-Z][A-Z0-9]{0,6}(_[A-Z0-9]{1,6}){0,2}", fullmatch=True).filter(
    lambda n: not n.startswith("SHOAL") and not is_secret(n, "plain"))
_secret_name = st.builds(lambda a, w: f"{a}_{w}", st.sampled_from(["DB", "OPENAI", "SVC", "MY"]),
                         st.sampled_from(["PASSWD", "APIKEY", "TOKEN", "SECRET", "CREDENTIALS",
                                          "PWD", "KEY", "AUTH"]))


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("secrets")


@given(name=_plain_name, value=_in_context)
def test_a_credential_under_any_name_reaches_no_plan_script_or_manifest(
        tmp: Path, name: str, value: str) -> None:
    env_vars = {name: value, **PLAIN}
    assert value not in dry_run_plan(env_vars)
    for text in slurm_scripts(tmp, env_vars).values():
        assert value not in text
    with pytest.raises(SpecError, match=r"shoal\.Secret") as e:
        k8s_manifests(env_vars)
    assert value not in str(e.value)


@given(name=_secret_name, value=st.text(min_size=1, max_size=40).filter(
    lambda v: "\x00" not in v and len(v.strip()) > 3))
def test_a_secret_named_variable_reaches_no_plan_or_script_whatever_its_value(
        tmp: Path, name: str, value: str) -> None:
    env_vars = {name: value}
    plan = dry_run_plan(env_vars)
    assert f"{name}=<redacted>" in plan
    for text in slurm_scripts(tmp, env_vars).values():
        assert f"export {name}=" not in text
    with pytest.raises(SpecError):
        k8s_manifests(env_vars)


_BASELINE = "plain"
_hostile = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["a\nb", "\n#SBATCH --nodes=99", "x'; rm -rf ~; '", '"$(id)"', "$(id)",
                     "`id`", "${HOME}", "a\x00b", "line\r\nbreak", "\\", "--- \nkind: Pod",
                     "key: value", "- item", "{a: b}", "&anchor", "!!python/object", "#",
                     "\ud7ff", "  ", "\t", "a\x1b[31mred"]),
)


def _sbatch(text: str) -> list[str]:
    # Split as sbatch reads a script: at "\n" only (str.splitlines also splits at \x1c, \u2028).
    return [line for line in text.split("\n") if line.startswith("#SBATCH")]


def _export(text: str, name: str) -> bytes | None:
    """What bash makes of the script's one line that exports ``name``: its value, as bytes."""
    lines = [line for line in text.split("\n") if line.startswith(f"export {name}=")]
    if not lines:
        return None
    assert len(lines) == 1
    done = subprocess.run(["bash", "-c", f'{lines[0]}\nprintf %s "${name}"'],
                          capture_output=True, check=True, timeout=30)
    return done.stdout


@given(value=_hostile)
def test_any_value_is_refused_at_construction_or_stays_a_value_everywhere(
        tmp: Path, value: str) -> None:
    name = "USER_SETTING"
    try:
        checked = dict(shoal.TaskEnvironment("hostile-env", env_vars={name: value}).env_vars)
    except SpecError as e:
        assert "\x00" in value and "NUL" in str(e)
        return
    secret = is_secret(name, checked[name])
    base_plan, plan = dry_run_plan({name: _BASELINE}), dry_run_plan(checked)
    assert len(plan.splitlines()) == len(base_plan.splitlines())  # no forged plan line
    base_scripts, scripts = slurm_scripts(tmp, {name: _BASELINE}), slurm_scripts(tmp, checked)
    for task, text in scripts.items():
        assert _sbatch(text) == _sbatch(base_scripts[task])  # the same directives
        assert _export(text, name) == (None if secret else value.encode())
    if secret:
        with pytest.raises(SpecError):
            k8s_manifests(checked)
        return
    base_k8s, k8s = k8s_manifests({name: _BASELINE}), k8s_manifests(checked)
    import yaml

    for kind, objects in k8s.items():
        again = list(yaml.safe_load_all(to_yaml(objects)))
        assert again == objects  # YAML gives back exactly the objects: no key added
        assert _env_values(again)[name] == value
        assert _keys(again) == _keys(base_k8s[kind])


def _keys(node: Any, at: str = "") -> set[str]:
    if isinstance(node, dict):
        return {f"{at}/{k}" for k in node} | {p for k, v in node.items()
                                                 for p in _keys(v, f"{at}/{k}")}
    if isinstance(node, list):
        return {p for v in node for p in _keys(v, f"{at}[]")}
    return set()


def test_a_pod_templates_own_env_value_that_looks_secret_is_refused() -> None:
    from tests.kubernetes.test_compile import _compile, _env_task

    def template(value: str) -> shoal.PodTemplate:
        return shoal.PodTemplate(pod_spec={"containers": [
            {"name": "primary", "env": [{"name": "DATABASE_URL", "value": value}]}]})

    with pytest.raises(SpecError, match="secretKeyRef") as e:
        _compile(_env_task(pod_template=template(FINDING_3["DATABASE_URL"])))
    assert FINDING_3["DATABASE_URL"] not in str(e.value)
    objects = _compile(_env_task(pod_template=template("postgres://db.internal:5432/app")))
    assert _env_values(objects)["DATABASE_URL"] == "postgres://db.internal:5432/app"


@given(value=st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(),
                       st.binary(max_size=4), st.lists(st.integers(), max_size=2)))
def test_not_secret_takes_a_string_or_a_number_or_says_why_not(value: Any) -> None:
    try:
        marked = shoal.NotSecret(value)
    except SpecError:
        assert isinstance(value, bool) or not isinstance(value, str | int | float)
        return
    assert isinstance(marked, str) and marked == str(value)
