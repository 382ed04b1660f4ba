"""`shoal.Image`: the container image a task environment runs in, built from its recipe.

Code outside ``_api/image/`` imports the names in ``__all__`` from ``shoal._api.image``.
Its modules: ``image.py`` (`Image`: Flyte's builder methods, the tag, the Dockerfile),
``layers.py`` (one layer per builder call, `PythonWheels`), ``context.py`` (the local files
copied into the build and hashed into the tag), ``checks.py`` (argument checks, requirement
parsing, the registry setting) and ``script.py`` (a script's PEP 723 block). None imports a
heavy library.
"""

from __future__ import annotations

from shoal._api.image.checks import check_registry, env_name_guess
from shoal._api.image.image import Image
from shoal._api.image.layers import PythonWheels

__all__ = ["Image", "PythonWheels", "check_registry", "env_name_guess"]
