"""Tables printed in the terminal: the classic result layout
(``TN EPI STG PAD UNR VEC REGS SPILL SMEM_KB MS TFLOPS CHECKSUM STATUS``) and plain ones."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas only for a type: printing a line needs no pandas import
    import pandas as pd

# Short column names of the classic layout; any other define keeps its own name.
SHORT = {
    "TN": "TN",
    "NUM_EPI_WARPS": "EPI",
    "N_STAGES": "STG",
    "STAGING_ROW_PAD": "PAD",
    "PHASE2_UNROLL": "UNR",
    "COMBINED_LOAD_VEC": "VEC",
}


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """``text`` with control characters (escape sequences, newlines, NUL) written as ``\\xNN``:
    a name from a storage never moves the terminal's cursor or splits a line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", str(text))


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e5 else f"{value:.1f}"
    return printable(value)


def render(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    rows = [[_fmt(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    return "\n".join(lines)


def seed_table(table: pd.DataFrame, axes: Sequence[str]) -> str:
    """The results table (:func:`tuner.store.results.ranked`) in the classic layout; the first ok row is BEST."""
    headers = [SHORT.get(a, a) for a in axes] + ["REGS", "SPILL", "SMEM_KB", "MS", "TFLOPS", "CHECKSUM", "STATUS"]
    body = []
    for i, r in enumerate(table.to_dict("records")):
        smem = r["smem_bytes"]
        status = "BEST" if i == 0 and r["status"] == "ok" else r["status"]
        body.append([r[a] for a in axes] + [_int(r["regs"]), _int(r["spills"]),
                     round(smem / 1024, 1) if _known(smem) else None, r["ms"], r["tflops"], r["checksum"], status])
    return render(headers, body)


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _int(value: Any) -> int | None:
    return int(value) if _known(value) else None
