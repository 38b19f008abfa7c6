"""What loading the engine imports."""

from __future__ import annotations

import subprocess
import sys


def test_the_engine_leaves_no_lazy_numpy_import_for_its_first_np_unique() -> None:
    """numpy imports numpy.ma on the first np.unique call (~25 ms): loading the engine
    must already have done it, or the first batch that calls np.unique (ids crossing
    a width, a cancel naming an id twice) stalls under the engine's lock."""
    code = "import sys, delayq.engine; print('numpy.ma' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "True"
