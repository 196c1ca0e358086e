"""A kernel's ABI as its PTX states it: the ``.entry``'s parameters (size, alignment) and the
launch directives that the driver checks at launch time (``.maxntid``, ``.reqnctapercluster``...).

PTX is the one place where both are spelled out exactly as the CUBIN will have them, whatever C++
produced them: a ``const __grid_constant__ CUtensorMap`` is ``.param .align 64 .b8 x[128]``, a
pointer ``.param .u64``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\((.*?)\)\s*(.*?)\{", re.DOTALL)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.([busf])(8|16|32|64)\b(.*?)\s([A-Za-z_$][\w$]*)\s*(?:\[(\d+)\])?\s*$",
                    re.DOTALL)
_DIRECTIVE = re.compile(r"\.(maxntid|reqntid|minnctapersm|maxnctapersm|reqnctapercluster|maxclusterrank|maxnreg)"
                        r"\s+(\d+(?:\s*,\s*\d+)*)")


@dataclass(frozen=True)
class PtxParam:
    """One kernel parameter: ``ptx_type`` is the element type (``u64``, ``b8``), ``count`` the
    array length (1 for a scalar)."""

    ptx_type: str
    count: int
    align: int

    @property
    def size(self) -> int:
        return _SIZES[self.ptx_type[1:]] * self.count


@dataclass(frozen=True)
class PtxEntry:
    """A kernel entry: its name, parameters, and the launch directives found (dims padded to 3)."""

    name: str
    params: tuple[PtxParam, ...]
    maxntid: tuple[int, int, int] | None = None
    reqntid: tuple[int, int, int] | None = None
    minnctapersm: int | None = None
    reqnctapercluster: tuple[int, int, int] | None = None
    maxclusterrank: int | None = None
    explicitcluster: bool = False

    @property
    def signature(self) -> tuple[tuple[int, int], ...]:
        """(size, alignment) of each parameter: what the launch's argument array must match."""
        return tuple((p.size, p.align) for p in self.params)


def _dims(text: str) -> tuple[int, int, int]:
    x, y, z = ([int(v) for v in text.split(",")] + [1, 1])[:3]
    return x, y, z


def parse_entry(ptx: str, name: str | None = None) -> PtxEntry:
    """The entry ``name`` (the only one when None) of a PTX module; ``ValueError`` when absent."""
    entries = {m.group(1): m for m in _ENTRY.finditer(ptx)}
    if name is None and len(entries) == 1:
        name = next(iter(entries))
    match = entries.get(name or "")
    if match is None:
        raise ValueError(f"PTX has no entry {name!r} (entries: {', '.join(entries) or 'none'})")
    params = []
    for text in filter(None, (p.strip() for p in match.group(2).split(","))):
        param = _PARAM.match(text)
        if param is None:
            raise ValueError(f"unrecognised PTX parameter {text!r} of {name}")
        align, kind, bits, _qualifiers, _pname, count = param.groups()
        element = _SIZES[bits]
        params.append(PtxParam(kind + bits, int(count or 1), int(align or element)))
    header = match.group(3)
    found = {d: v for d, v in _DIRECTIVE.findall(header)}
    return PtxEntry(
        name=match.group(1),
        params=tuple(params),
        maxntid=_dims(found["maxntid"]) if "maxntid" in found else None,
        reqntid=_dims(found["reqntid"]) if "reqntid" in found else None,
        minnctapersm=int(found["minnctapersm"]) if "minnctapersm" in found else None,
        reqnctapercluster=_dims(found["reqnctapercluster"]) if "reqnctapercluster" in found else None,
        maxclusterrank=int(found["maxclusterrank"]) if "maxclusterrank" in found else None,
        explicitcluster=".explicitcluster" in header,
    )
