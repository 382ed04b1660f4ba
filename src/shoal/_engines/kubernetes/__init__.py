"""The Kubernetes engine: task calls compiled to Jobs and JobSets (Kueue-ready), pure and
printable; see `manifests` for what a call becomes and why."""

from __future__ import annotations

from shoal._engines.kubernetes.config import KubeConfig
from shoal._engines.kubernetes.manifests import (
    Start,
    compile_call,
    compile_driver,
    compile_rbac,
    to_yaml,
)
from shoal._engines.kubernetes.pods import CodeBundle

__all__ = [
    "CodeBundle",
    "KubeConfig",
    "Start",
    "compile_call",
    "compile_driver",
    "compile_rbac",
    "to_yaml",
]
