"""The worker double of tests/fake_backend.py, plus a marker: ``FAULT_MARK_DIR/<pid>``
exists while a config is being checked, so a test can kill the worker mid-trial."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_backend import FakeBackend


class MarkingBackend(FakeBackend):
    def check(self, handle, spec, problem, check_rows, seed, tolerance=None):
        mark = Path(os.environ["FAULT_MARK_DIR"]) / str(os.getpid())
        mark.write_text(str(handle))
        try:
            return super().check(handle, spec, problem, check_rows, seed, tolerance)
        finally:
            mark.unlink(missing_ok=True)
