"""A journal file that survives a damaged line anywhere.

Optuna's ``JournalFileBackend`` raises on the first line that is not a whole JSON record, and
from then on every command fails on the file (even a complete-but-invalid last line: the next
append buries it). A writer that dies mid-line, or a disk that fills up under several writers,
leaves such lines, often with a whole record appended right after the partial one.

:class:`TolerantJournalFile` reads the same file, and for each damaged line

- keeps a whole record found after the damage (a partial record, then a writer's append);
- stands in for a trial or study whose creation record is damaged with an empty RUNNING trial
  (a study named after the line), so that the ids of everything after it stay right (later
  records of that trial -- params, results, state -- still apply to it);
- skips anything else;

and says so once per line on stderr. The file itself is never rewritten.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Generator
from typing import Any

from optuna.storages.journal import JournalFileBackend

#: fields each operation needs to be replayed (optuna.storages.journal._storage), by op code
_NEEDS: dict[int, tuple[str, ...]] = {
    0: ("study_name", "directions"),
    1: ("study_id",),
    2: ("study_id", "user_attr"),
    3: ("study_id", "system_attr"),
    4: ("study_id", "datetime_start"),
    5: ("trial_id", "param_name", "param_value_internal", "distribution"),
    6: ("trial_id", "state"),
    7: ("trial_id", "step", "intermediate_value"),
    8: ("trial_id", "user_attr"),
    9: ("trial_id", "system_attr"),
    10: (),
}
_CREATE_STUDY, _CREATE_TRIAL = 0, 4
_RECORD_START = b'{"op_code":'
_OP = re.compile(rb'^\{"op_code":(\d+)')
_STUDY_ID = re.compile(rb'"study_id":(\d+)')
DAMAGED_ATTR = "journal_damaged_line"


def _valid(record: object) -> bool:
    if not isinstance(record, dict) or not isinstance(record.get("worker_id"), str):
        return False
    op = record.get("op_code")
    return isinstance(op, int) and op in _NEEDS and all(key in record for key in _NEEDS[op])


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return record if _valid(record) else None


class TolerantJournalFile(JournalFileBackend):
    """``JournalFileBackend`` whose reader skips (and reports) damaged lines; see the module."""

    def __init__(self, file_path: str) -> None:
        super().__init__(file_path)
        self.path = file_path
        #: records yielded so far -> (byte offset, line number) of the next line
        self._next_line: dict[int, tuple[int, int]] = {0: (0, 0)}
        self._reported: set[int] = set()
        self._pending: list[str] = []  # reports not yet printed
        self._study_names: list[str] = []  # studies created so far (ids are their order; a repeated name makes none)
        self._last_study = -1  # the study of the last trial created: a damaged creation's best guess

    @property
    def foreign(self) -> bool:
        """Damaged lines and not one record read: not a journal (another file given by mistake)."""
        return bool(self._reported) and max(self._next_line) == 0

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        number = max(n for n in self._next_line if n <= log_number_from)
        offset, line_no = self._next_line[number]
        with open(self.path, "rb") as f:
            end = os.fstat(f.fileno()).st_size  # what was there when reading began (writers append)
            f.seek(offset)
            while offset < end:
                line = f.readline()
                if not line.endswith(b"\n") or offset + len(line) > end:
                    break  # a record being written now, or a partial tail: read again next time
                line_no += 1
                records = self._records(line, line_no)
                offset += len(line)
                for record in records:
                    number += 1
                    if number > log_number_from:
                        yield record
                self._next_line[number] = (offset, line_no)
        if not self.foreign:  # a file with no record at all is refused whole (tuner.store.storage), not line by line
            for message in self._pending:
                print(message, file=sys.stderr)
            self._pending.clear()

    def _records(self, line: bytes, line_no: int) -> list[dict[str, Any]]:
        record = _parse(line)
        if record is not None:
            self._note(record)
            return [record]
        kept = []
        op = _OP.match(line)
        if op is not None and int(op.group(1)) in (_CREATE_STUDY, _CREATE_TRIAL):
            kept.append(self._stand_in(int(op.group(1)), line, line_no))
        start = line.find(_RECORD_START, 1)
        while start > 0:  # a whole record appended after a partial one
            appended = _parse(line[start:])
            if appended is not None:
                self._note(appended)
                kept.append(appended)
                break
            start = line.find(_RECORD_START, start + 1)
        self._report(line, line_no, kept)
        return kept

    def _note(self, record: dict[str, Any]) -> None:
        if record["op_code"] == _CREATE_STUDY and record["study_name"] not in self._study_names:
            self._study_names.append(record["study_name"])
            self._last_study = len(self._study_names) - 1
        elif record["op_code"] == _CREATE_TRIAL:
            self._last_study = record["study_id"]

    def _stand_in(self, op: int, line: bytes, line_no: int) -> dict[str, Any]:
        if op == _CREATE_STUDY:
            name = f"damaged-journal-line-{line_no}"
            self._study_names.append(name)
            return {"op_code": op, "worker_id": "damaged-record", "study_name": name, "directions": [1]}
        study = _STUDY_ID.search(line)  # cut off before it: most likely the study of the trial before
        return {"op_code": op, "worker_id": "damaged-record", "study_id": int(study.group(1)) if study else self._last_study,
                "datetime_start": None, "user_attrs": {DAMAGED_ATTR: line_no}}

    def _report(self, line: bytes, line_no: int, kept: list[dict[str, Any]]) -> None:
        if line_no in self._reported:
            return
        self._reported.add(line_no)
        what = "skipped"
        if kept and kept[-1].get("worker_id") != "damaged-record":
            what = "the whole record after the damage kept"
        if kept and kept[0].get("worker_id") == "damaged-record":
            what += "; a placeholder keeps the ids after it right"
        self._pending.append(f"tuner: journal file {self.path}: line {line_no} is damaged "
                             f"({len(line)} bytes: {line[:40]!r}...); {what}; every other record is read")
