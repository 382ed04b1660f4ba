"""Argument checks for the ``Image`` builder, and reading pip requirements.

Every check either returns the value (sometimes normalized) or raises a ``SpecError`` that names
the builder call, the rule and a fix ("did you mean 'numpy==1.24'?"). Requirements are read
by `packaging` (PEP 508: extras, version specifiers, markers, ``name @ url``), so the common
slips (``"numpy=1.24"``, ``"pip install torch"``, several packages in one string) are caught
before anything is built, and every valid requirement, markers and extras included, is checked
against the local interpreter (`shoal._runtime.packages`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from shoal._runtime.packages import parse_requirement
from shoal._spec.secret_names import NotSecret, secret_reason, shown
from shoal.errors import SpecError

__all__ = [
    "DEFAULT_IMAGE_NAME",
    "MIN_PYTHON",
    "check_apt",
    "check_commands",
    "check_dst",
    "check_env_vars",
    "check_image_ref",
    "check_pip_options",
    "check_python_version",
    "check_registry",
    "check_repository",
    "check_requirement",
    "check_url",
    "check_wheel_package",
    "check_workdir",
    "env_name_guess",
    "local_path",
    "normalize_name",
    "read_requirements",
    "requirement_name",
]

# The repository name an image gets when none is given.
DEFAULT_IMAGE_NAME = "shoal"
# The oldest Python an image may ask for (Shoal itself needs it).
MIN_PYTHON = (3, 10)

# --- validation grammars ---------------------------------------------------------------------
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"  # a PEP 508 distribution name
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")  # a bare URL pip can install from
_EGG = re.compile(rf"#egg=(?P<name>{_NAME})")
_APT = re.compile(r"^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?(?:=[A-Za-z0-9.+~:-]+)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PYTHON_VERSION = re.compile(r"^3\.(\d{1,2})$")
_REPO_PART = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_REPO_PART}(?:/{_REPO_PART})*$")
_REGISTRY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::\d+)?(?:/[a-z0-9._-]+)*$")
_IMAGE_REF = re.compile(r"^(?!.*://)[A-Za-z0-9][A-Za-z0-9._/:@-]*$")


# --- requirements files and names ------------------------------------------------------------


def read_requirements(path: Path, field: str, seen: frozenset[Path] = frozenset()) -> list[str]:
    """The requirements a requirements file declares, nested ``-r`` files included, as PEP 508
    strings (a ``URL#egg=name`` line as its name); options and unnamed URLs are left out."""
    if not path.is_file():
        raise SpecError(field, str(path), "does not exist", "pass an existing requirements file")
    requirements: list[str] = []
    text = path.read_text().replace("\\\n", "")
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        nested = re.match(r"^(?:-r|--requirement)(?:\s+|=)(\S+)$", line)
        if nested:
            child = (path.parent / nested.group(1)).resolve()
            if child not in seen:
                requirements += read_requirements(child, field, seen | {path.resolve()})
            continue
        if line.startswith("-"):
            continue  # options: --index-url, -c constraints, -e editables
        if parse_requirement(line) is not None:
            requirements.append(line)
        elif egg := _EGG.search(line):
            requirements.append(egg.group("name"))
    return requirements


def requirement_name(requirement: str) -> str | None:
    """The distribution a requirement installs (markers and extras aside), or None for a URL
    that names none."""
    req = parse_requirement(requirement)
    if req is not None:
        return req.name
    egg = _EGG.search(requirement)
    return egg.group("name") if egg else None


def normalize_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503



# --- builder arguments -----------------------------------------------------------------------


def check_requirement(value: object) -> str:
    field = "with_pip_packages"
    if not isinstance(value, str):
        raise SpecError(field, value, "each package must be a string",
                        'pass names such as with_pip_packages("torch", "numpy")')
    if not value.strip():
        raise SpecError(field, value, "a package must not be empty",
                        'pass names such as "torch" or "numpy>=1.24"')
    if value != value.strip():
        raise SpecError(field, value, "a package must not start or end with whitespace",
                        f"use {value.strip()!r}")
    if parse_requirement(value) is not None or _URL.match(value):
        return value
    raise SpecError(field, value, "is not a pip requirement (PEP 508: name[extras] "
                    "version-specifiers; markers, or name @ url)", _requirement_fix(value))


def _requirement_fix(value: str) -> str:
    tokens = value.split()
    if tokens[:2] == ["pip", "install"] and len(tokens) > 2:
        return "drop 'pip install': " + ", ".join(repr(t) for t in tokens[2:])
    if value.startswith(("-r", "--requirement")):
        return "use .with_requirements(path) for a requirements file"
    if value.startswith(("-i", "--index-url")):
        return "use with_pip_packages(..., index_url=URL)"
    if value.startswith("--extra-index-url"):
        return "use with_pip_packages(..., extra_index_urls=[URL])"
    if value == "--pre":
        return "use with_pip_packages(..., pre=True)"
    if value.startswith("-"):
        return "pip options are not packages; pass package names only"
    single = re.match(rf"^({_NAME})\s*=\s*([0-9][A-Za-z0-9.*+!_-]*)$", value)
    if single:
        return f"did you mean {single.group(1) + '==' + single.group(2)!r}?"
    if len(tokens) == 2 and re.match(r"^v?\d", tokens[1]) and re.match(rf"^{_NAME}$", tokens[0]):
        return f"did you mean {tokens[0] + '==' + tokens[1].lstrip('v')!r}?"
    if len(tokens) > 1 and all(parse_requirement(t) is not None for t in tokens):
        return "pass each package as its own argument: with_pip_packages(" + ", ".join(
            repr(t) for t in tokens) + ")"
    return 'use a name with optional version specifiers, e.g. "numpy>=1.24,<3"'


def check_pip_options(field: str, index_url: object, extra_index_urls: object,
                      pre: object) -> tuple[str, ...]:
    """Check pip's index options; return ``extra_index_urls`` as a tuple."""
    if index_url is not None:
        check_url(f"{field}(index_url)", index_url)
    if isinstance(extra_index_urls, str):
        extras: tuple[object, ...] = (extra_index_urls,)
    elif extra_index_urls is None:
        extras = ()
    elif isinstance(extra_index_urls, Sequence):
        extras = tuple(extra_index_urls)
    else:
        raise SpecError(f"{field}(extra_index_urls)", extra_index_urls,
                        "must be a URL or a list of URLs", 'use ["https://pypi.org/simple"]')
    urls = tuple(check_url(f"{field}(extra_index_urls)", u) for u in extras)
    if not isinstance(pre, bool):
        raise SpecError(f"{field}(pre)", pre, "must be a bool", "use pre=True")
    return urls


def check_wheel_package(value: object) -> str:
    if isinstance(value, str) and re.match(rf"^{_NAME}$", value):
        return value
    guess = re.split(r"[^A-Za-z0-9._-]", str(value).strip())[0] if isinstance(value, str) else ""
    raise SpecError("PythonWheels(package_name)", value, "must be a distribution name "
                    "(the name of the wheels, without version)",
                    f"use package_name={guess or 'my_package'!r}")


def check_apt(value: object) -> str:
    field = "with_apt_packages"
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field, value, "each package must be a non-empty string",
                        'pass names such as with_apt_packages("git", "curl")')
    if _APT.match(value):
        return value
    tokens = value.split()
    if len(tokens) > 1 and all(_APT.match(t) for t in tokens):
        fix = "pass each package as its own argument: with_apt_packages(" + ", ".join(
            repr(t) for t in tokens) + ")"
    elif _APT.match(value.strip().lower()):
        fix = f"Debian package names are lower case: use {value.strip().lower()!r}"
    elif value.startswith("-"):
        fix = "apt-get options are not packages; pass package names only"
    else:
        fix = 'use a Debian package name such as "libaio-dev" (optionally "name=version")'
    raise SpecError(field, value, "is not a Debian package name ([a-z0-9][a-z0-9+.-]+, "
                    "optionally :arch and =version)", fix)


def check_python_version(value: object) -> str:
    field = "python_version"
    text = ".".join(str(v) for v in value) if isinstance(value, tuple) else value
    if not isinstance(text, str):
        raise SpecError(field, value, 'must be a "3.x" string', 'use python_version="3.11"')
    m = _PYTHON_VERSION.match(text)
    if m is None:
        parts = re.findall(r"\d+", text)
        guess = f"{parts[0]}.{parts[1]}" if len(parts) >= 2 else "3.11"
        raise SpecError(field, value, 'must be "major.minor", such as "3.11"',
                        f"use python_version={guess!r}")
    if (3, int(m.group(1))) < MIN_PYTHON:
        raise SpecError(field, value, f"Shoal needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or "
                        "newer", 'use python_version="3.11"')
    return text


def check_repository(value: object) -> str:
    if isinstance(value, str) and _REPOSITORY.match(value):
        return value
    guess = re.sub(r"[^a-z0-9._/-]+", "-", str(value).lower()).strip("-./_") or DEFAULT_IMAGE_NAME
    raise SpecError("name", value, "an image name must be lower case: [a-z0-9] parts joined by "
                    "'.', '_' or '-', separated by '/'", f"use name={guess!r}")


def check_registry(field: str, value: object) -> str:
    if isinstance(value, str) and _REGISTRY.match(value):
        return value
    guess = re.sub(r"^[a-z]+://", "", str(value)).strip().rstrip("/")
    raise SpecError(field, value, "must be a registry host[:port][/path] without a scheme "
                    "or a trailing '/'", f"use {guess or 'ghcr.io/my-org'!r}")


def check_image_ref(field: str, value: object) -> str:
    if isinstance(value, str) and _IMAGE_REF.match(value):
        return value
    guess = re.sub(r"^[a-z]+://", "", str(value)).strip() if isinstance(value, str) else ""
    raise SpecError(field, value, "must be an image reference such as "
                    '"python:3.11-slim" or "ghcr.io/org/img:tag"',
                    f"use {guess!r}" if guess and _IMAGE_REF.match(guess) else
                    'use "python:3.11-slim-bookworm"')


def check_url(field: str, value: object) -> str:
    if isinstance(value, str) and re.match(r"^(https?|file)://\S+$", value):
        return value
    guess = f"https://{value.strip()}" if isinstance(value, str) and value.strip() else (
        "https://download.pytorch.org/whl/cu124")
    raise SpecError(field, value, "must be an http(s):// or file:// URL", f"use {guess!r}")



def env_name_guess(key: object) -> str:
    out = re.sub(r"[^A-Za-z0-9_]+", "_", str(key)).strip("_").upper() or "MY_VAR"
    return "_" + out if out[0].isdigit() else out


def check_env_vars(env_vars: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``with_env_vars``'s mapping as (name, value) pairs sorted by name."""
    if not isinstance(env_vars, Mapping) or not env_vars:
        raise SpecError(
            "with_env_vars", env_vars, "must be a non-empty dict of str to str",
            'use with_env_vars({"HF_HOME": "/tmp/hf"})',
        )
    items: list[tuple[str, str]] = []
    for key, value in sorted(env_vars.items(), key=lambda kv: str(kv[0])):
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise SpecError(
                "with_env_vars", key, "a variable name must match [A-Za-z_][A-Za-z0-9_]*",
                f"use {env_name_guess(key)!r}",
            )
        if not isinstance(value, str):
            raise SpecError(
                f"with_env_vars[{key!r}]", value, "values must be strings",
                f"use {str(value)!r}",
            )
        if "\n" in value or "\r" in value or "\x00" in value:
            raise SpecError(
                f"with_env_vars[{key!r}]", shown(key, value),
                "values must be one line, without a NUL byte", "remove the line breaks",
            )
        reason = secret_reason(key, value)
        if reason is not None:
            # An ENV line is in every layer of the image, for anyone who pulls it.
            raise SpecError(
                f"with_env_vars[{key!r}]", shown(key, value), f"looks like a secret ({reason}), "
                "and an image's ENV is readable by anyone who can pull the image",
                f"give it to the environment instead: TaskEnvironment(secrets=[shoal.Secret("
                f"key=..., as_env_var={key!r})]); if it is no secret, say so: "
                f"with_env_vars({{{key!r}: shoal.NotSecret(...)}})",
            )
        items.append((key, str(value) if isinstance(value, NotSecret) else value))
    return tuple(items)


def check_commands(commands: tuple[str | Sequence[str], ...]) -> tuple[str, ...]:
    """``with_commands``'s arguments as one flat tuple of one-line commands."""
    flat: list[str] = []
    for c in commands:
        if isinstance(c, str):
            flat.append(c)
        elif isinstance(c, (list, tuple)):
            flat.extend(c)
        else:
            raise SpecError(
                "with_commands", c, "each argument is a command string or a list of them",
                'use with_commands("pip install -e .")',
            )
    if not flat:
        raise SpecError(
            "with_commands", commands, "needs at least one command",
            'use with_commands("pip install -e .")',
        )
    for c in flat:
        if not isinstance(c, str) or not c.strip():
            raise SpecError(
                "with_commands", c, "each command must be a non-empty string",
                'use with_commands("nvidia-smi || true")',
            )
        if "\n" in c or "\r" in c:
            raise SpecError(
                "with_commands", c, "a command must be one line",
                "pass each line as its own command, or join them with ' && '",
            )
    return tuple(flat)


def check_workdir(field: str, value: object) -> str:
    if isinstance(value, str) and value.startswith("/") and not re.search(r"\s", value):
        return value
    guess = "/" + value.strip().strip("./") if isinstance(value, str) else "/app"
    raise SpecError(field, value, "must be an absolute path without spaces", f"use {guess!r}")


def check_dst(field: str, value: object) -> str:
    if isinstance(value, str) and value and "\n" not in value and "\r" not in value:
        return value
    raise SpecError(f"{field}(dst)", value, "must be a non-empty, one-line path",
                    'use dst="." (the working directory) or an absolute path such as "/app"')


def local_path(field: str, value: object) -> Path:
    if isinstance(value, str | os.PathLike) and str(value).strip():
        return Path(value).absolute()
    raise SpecError(field, value, "must be a path (str or pathlib.Path)",
                    'use a path such as "requirements.txt" or Path("src")')
