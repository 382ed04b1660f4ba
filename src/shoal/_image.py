"""``flyte._image``'s names, for code ported from Flyte 2 (``from flyte._image import ...``).

Flyte 2's clustered examples build their image with

    from flyte._image import DIST_FOLDER, PythonWheels
    image = Image.from_debian_base(name="ddp").clone(
        addl_layer=PythonWheels(wheel_dir=DIST_FOLDER, package_name="flyte"))

so ``from shoal._image import ...`` answers with Shoal's own classes, which live in
``shoal._api``. Shoal's public names are on ``shoal.Image`` (its builder methods and ``clone``);
this module exists only so such code runs with the import changed.

``DIST_FOLDER`` is the ``dist/`` folder of the checkout Shoal runs from (where ``python -m
build`` puts wheels), as Flyte's is of its own checkout. Locally a task runs in this interpreter,
so a ``PythonWheels`` layer only has to name a package importable here (the local engine warns
when it is not); for ``package_name="flyte"`` Shoal itself stands in. Its folder may be absent
until the image is built: ``shoal image build`` refuses a folder without the package's wheel.
"""

from __future__ import annotations

from pathlib import Path

from shoal._api.image import Image, PythonWheels

__all__ = ["DIST_FOLDER", "Image", "PythonWheels"]

DIST_FOLDER = Path(__file__).resolve().parent.parent.parent / "dist"
