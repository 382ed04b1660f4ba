"""Run inside the mount namespace after the task failed: what its checkpoint holds now.

    python disk_full_check.py STORE_DIR OUT_JSON

Writes the committed steps, the SHA-256 of the latest version as loaded (verified), what a
load of step 1 says, and every object left in the store's checkpoint folder.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

from shoal._storage.checkpoints import Checkpoint
from shoal.errors import ShoalError


def main() -> None:
    store, out = Path(sys.argv[1]), Path(sys.argv[2])
    (folder,) = [p for p in (store / "checkpoints").glob("*/*") if p.is_dir()]
    with tempfile.TemporaryDirectory() as local:
        checkpoint = Checkpoint(folder.as_uri(), local_dir=local)
        latest = checkpoint.load_sync()
        assert isinstance(latest, bytes)
        try:
            checkpoint.load_sync(step=1)
            step1 = "loaded"
        except ShoalError as e:
            step1 = f"{type(e).__name__}: {e}"
        out.write_text(json.dumps({
            "steps": checkpoint.steps(), "sha256": hashlib.sha256(latest).hexdigest(),
            "step1": step1,
            "objects": sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                              if p.is_file()),
        }))


if __name__ == "__main__":
    main()
