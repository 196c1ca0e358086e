"""A kernel's source as NVRTC sees it: the ``.cu`` file and the local headers it includes.

Its digest is a kernel's source hash (the study's fingerprint and the compile cache's key).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
#: a ``__global__`` function's name (qualifiers and ``__launch_bounds__(...)`` between)
_GLOBAL = re.compile(r"__global__\s+(?:(?:__launch_bounds__\s*\([^)]*\)|\w+)\s*)*?(?!__launch_bounds__\b)(\w+)\s*\(")


@dataclass
class SourceBundle:
    """A ``.cu`` file and the local headers it includes, as NVRTC will see them."""

    name: str
    text: str
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> SourceBundle:
        path = Path(path)
        text = path.read_text()
        headers: dict[str, str] = {}
        pending = list(_INCLUDE.findall(text))
        while pending:
            include = pending.pop()
            if include in headers:
                continue
            header_path = path.parent / include
            if header_path.is_file():  # anything else must be an NVRTC built-in header
                headers[include] = header_path.read_text()
                pending.extend(_INCLUDE.findall(headers[include]))
        return cls(path.name, text, headers)

    def global_functions(self) -> list[str]:
        """The names of the ``__global__`` functions it defines, in order (read from the text: a macro
        that defines one is not seen)."""
        return list(dict.fromkeys(n for text in [self.text, *self.headers.values()] for n in _GLOBAL.findall(text)))

    def digest(self) -> str:
        h = hashlib.sha256(self.text.encode())
        for name in sorted(self.headers):
            h.update(name.encode() + b"\0" + self.headers[name].encode())
        return h.hexdigest()
