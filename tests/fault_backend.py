"""The worker double of tests/fake_backend.py, plus a marker: ``FAULT_MARK_DIR/<pid>``
exists while a measurement is in progress, so a test can kill the worker mid-trial."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_backend import FakeBackend  # noqa: E402


class MarkingBackend(FakeBackend):
    def measure(self, job, channel):
        mark = Path(os.environ["FAULT_MARK_DIR"]) / str(os.getpid())
        mark.write_text(str(job["config"]))
        try:
            return super().measure(job, channel)
        finally:
            mark.unlink(missing_ok=True)
