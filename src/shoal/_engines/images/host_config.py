"""The host's pip settings and CA bundle, handed to an image build without changing the image.

A build on a machine behind a private index or a TLS-inspecting proxy needs what the host's
pip uses: its index URLs and the CA bundle it trusts. They are not part of the image's recipe
(the same recipe must give the same content tag on every machine), and they may hold
credentials (an index URL with a token), so they never reach a layer, the image's config or
its history:

- the pip settings that name places reachable from a build (http(s) index, extra-index and
  find-links URLs, trusted hosts), read the way pip reads them (its config files in order,
  then ``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``, ``PIP_FIND_LINKS``, ``PIP_TRUSTED_HOST``),
  become one ``pip.conf`` given to the build as the secret ``shoal-pip.conf``; local paths
  and ``file://`` URLs are left out (a build cannot see the host's disk);
- the CA bundle (``PIP_CERT``, pip's ``cert``, ``REQUESTS_CA_BUNDLE``, ``SSL_CERT_FILE``,
  else Debian's ``/etc/ssl/certs/ca-certificates.crt``) is the secret ``shoal-ca.crt``, and
  that ``pip.conf``'s ``cert``.

Secrets appear under ``/run/secrets/`` only while a ``RUN`` step runs: the build's own
Dockerfile (`build_dockerfile`, never the one the tag hashes) adds ``--mount=type=secret`` to
every ``RUN`` and declares ``ARG PIP_CONFIG_FILE``, ``SSL_CERT_FILE`` and
``REQUESTS_CA_BUNDLE`` (paths, given as build args), which point pip and Python at them.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shoal._storage.private import private_file

__all__ = ["CA_SECRET", "PIP_SECRET", "HostBuildConfig", "build_dockerfile",
           "host_build_config"]

PIP_SECRET = "shoal-pip.conf"
CA_SECRET = "shoal-ca.crt"
SECRETS_DIR = "/run/secrets"
DEBIAN_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
SYSTEM_PIP_CONF = Path("/etc/pip.conf")  # pip's site-wide file beside the XDG ones

# pip settings that say where packages come from, kept when they name a URL a build reaches.
_URL_KEYS = ("index-url", "extra-index-url", "find-links")
_KEPT_KEYS = (*_URL_KEYS, "trusted-host")
# pip's variables for them; they win over every config file, as in pip.
_ENV_KEYS = {"PIP_INDEX_URL": "index-url", "PIP_EXTRA_INDEX_URL": "extra-index-url",
             "PIP_FIND_LINKS": "find-links", "PIP_TRUSTED_HOST": "trusted-host"}


@dataclass(frozen=True)
class HostBuildConfig:
    """What a build gets from the host: a ``pip.conf`` text and a CA bundle, each optional;
    ``sources`` names where each came from (no values: they may hold credentials)."""

    pip_conf: str | None = None
    ca_bundle: Path | None = None
    sources: tuple[str, ...] = ()

    def secrets(self, folder: Path) -> dict[str, Path]:
        """Write the secret files into ``folder`` (private, 0600); id -> path."""
        out: dict[str, Path] = {}
        if self.pip_conf is not None:
            out[PIP_SECRET] = private_file(folder / PIP_SECRET)
            out[PIP_SECRET].write_text(self.pip_conf)
        if self.ca_bundle is not None:
            out[CA_SECRET] = private_file(folder / CA_SECRET)
            out[CA_SECRET].write_bytes(self.ca_bundle.read_bytes())
        return out

    @property
    def build_args(self) -> dict[str, str]:
        """Build args that point pip and Python at the secrets (paths, never values)."""
        args: dict[str, str] = {}
        if self.pip_conf is not None:
            args["PIP_CONFIG_FILE"] = f"{SECRETS_DIR}/{PIP_SECRET}"
        if self.ca_bundle is not None:
            args["SSL_CERT_FILE"] = args["REQUESTS_CA_BUNDLE"] = f"{SECRETS_DIR}/{CA_SECRET}"
        return args

    def build_dockerfile(self, text: str) -> str:
        return build_dockerfile(text, [s for s, on in ((PIP_SECRET, self.pip_conf is not None),
                                                       (CA_SECRET, self.ca_bundle is not None))
                                       if on], list(self.build_args))


def build_dockerfile(text: str, secret_ids: list[str], arg_names: list[str]) -> str:
    """``text`` with ``ARG`` lines after each ``FROM`` and the secrets mounted in each ``RUN``.

    Instructions are found as Docker reads them: a line ending in ``\\`` continues onto the
    next, comment lines are not instructions.
    """
    if not secret_ids and not arg_names:
        return text
    mounts = " ".join(f"--mount=type=secret,id={s}" for s in secret_ids)
    out: list[str] = []
    continued = False
    for line in text.splitlines():
        word = line.lstrip().split(" ", 1)[0].upper() if not continued else ""
        if word == "RUN" and mounts:
            head, _, rest = line.lstrip().partition(" ")
            line = f"{head} {mounts} {rest}"
        out.append(line)
        if word == "FROM":
            out += [f"ARG {name}" for name in arg_names]
        if not line.lstrip().startswith("#"):
            continued = line.endswith("\\")
    return "\n".join(out) + "\n"


def host_build_config(environ: Mapping[str, str] | None = None) -> HostBuildConfig:
    """The host's pip settings and CA bundle as a build gets them (see the module doc)."""
    env = os.environ if environ is None else environ
    sources: list[str] = []
    sections: dict[str, dict[str, str]] = {}
    cert: str | None = None
    for path in _pip_config_files(env):
        parser = configparser.RawConfigParser()
        try:
            read = parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            continue  # pip itself stops on such a file; the build then gets the others
        if not read:
            continue
        for section in parser.sections():
            for key, value in parser.items(section):
                key = key.replace("_", "-").lower()
                if key == "cert" and section in ("global", "install", "download"):
                    cert = value.strip()
                if key in _KEPT_KEYS and (kept := _reachable(key, value)):
                    sections.setdefault(section, {})[key] = kept
                    sources.append(str(path))
    for name, key in _ENV_KEYS.items():
        if env.get(name) and (kept := _reachable(key, env[name])):
            for keys in sections.values():
                keys.pop(key, None)
            sections.setdefault("global", {})[key] = kept
            sources.append(name)
    ca = _ca_bundle(env, cert)
    if ca is not None:
        sources.append(f"CA bundle {ca[0]} ({ca[1]})")
        sections.setdefault("global", {})["cert"] = f"{SECRETS_DIR}/{CA_SECRET}"
    if not sections:
        return HostBuildConfig()
    lines: list[str] = []
    for section in sorted(sections, key=lambda s: (s != "global", s)):
        if sections[section]:
            lines.append(f"[{section}]")
            lines += [f"{k} = {v}" for k, v in sorted(sections[section].items())]
    return HostBuildConfig(pip_conf="\n".join(lines) + "\n" if lines else None,
                           ca_bundle=None if ca is None else ca[0],
                           sources=tuple(dict.fromkeys(sources)))


def _pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's config files, lowest priority first (pip's ``get_configuration_files``)."""
    named = env.get("PIP_CONFIG_FILE")
    if named == os.devnull:
        return []
    dirs = [d for d in env.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep) if d]
    home = Path(env.get("HOME") or Path.home())
    config_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(dirs)] + [SYSTEM_PIP_CONF]
    files += [home / ".pip" / "pip.conf", config_home / "pip" / "pip.conf",
              Path(sys.prefix) / "pip.conf"]
    if named:
        files.append(Path(named).expanduser())
    return files


def _reachable(key: str, value: str) -> str:
    """The part of a pip setting a build can use: URLs over the network, not local paths."""
    items = value.split()
    if key in _URL_KEYS:
        items = [v for v in items if v.startswith(("http://", "https://"))]
    return " ".join(items)


def _ca_bundle(env: Mapping[str, str], pip_cert: str | None) -> tuple[Path, str] | None:
    named = [(env.get("PIP_CERT"), "PIP_CERT"), (pip_cert, "pip.conf cert"),
             (env.get("REQUESTS_CA_BUNDLE"), "REQUESTS_CA_BUNDLE"),
             (env.get("SSL_CERT_FILE"), "SSL_CERT_FILE"),
             (str(DEBIAN_CA_BUNDLE), "the system's")]
    for value, source in named:
        if value and Path(value).expanduser().is_file():
            return Path(value).expanduser(), source
    return None

