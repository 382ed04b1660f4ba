"""Data passed between tasks by reference, as in Flyte 2's ``flyte.io``.

``File`` and ``Dir`` are files and folders in the object store; ``DataFrame`` is a table
stored as parquet (``pip install 'shoal[dataframe]'``). A task may also declare
``pandas.DataFrame`` or ``pyarrow.Table`` directly; those are stored as parquet too.
"""

from __future__ import annotations

from shoal._api.dataframe import DataFrame
from shoal._api.io import Dir, File

__all__ = ["DataFrame", "Dir", "File"]
