"""What a CUBIN says about its kernels: entry names, the parameter table the driver marshals
arguments by, launch bounds and registers.

A CUBIN is an ELF file. Each kernel ``K`` has a section ``.nv.info.K`` of attributes (format byte,
attribute byte, then a value); ``EIATTR_KPARAM_INFO`` gives each parameter's ordinal, offset and
size, ``EIATTR_PARAM_CBANK`` where the parameters start in constant bank 0 (alignment is relative
to the bank), ``EIATTR_MAX_THREADS`` the ``__launch_bounds__``. The global ``.nv.info`` holds
``EIATTR_REGCOUNT`` per kernel symbol. These are what ``cuobjdump -elf`` prints; the driver reads
the same table when it copies ``kernelParams``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_EIATTR_MAX_THREADS = 0x05
_EIATTR_PARAM_CBANK = 0x0A
_EIATTR_KPARAM_INFO = 0x17
_EIATTR_REGCOUNT = 0x2F
_FORMAT_SIZES = {1: 2, 2: 2, 3: 2}  # EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL (padded to 4 bytes); EIFMT_SVAL (4) carries its size


class CubinError(ValueError):
    """Bytes that are not a CUBIN this reader understands."""


@dataclass(frozen=True)
class KernelParam:
    ordinal: int
    offset: int  # bytes from the start of the parameters
    size: int


@dataclass(frozen=True)
class CubinKernel:
    name: str
    params: tuple[KernelParam, ...]  # by ordinal
    param_base: int | None = None  # offset of the parameters in constant bank 0
    max_threads: int | None = None  # __launch_bounds__, as x * y * z
    regs: int | None = None


@dataclass(frozen=True)
class _Section:
    name: str
    offset: int
    size: int


def read_cubin(data: bytes) -> dict[str, CubinKernel]:
    """Every kernel (``__global__`` entry) of a CUBIN, by its symbol name."""
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] != 2:
        raise CubinError("not a 64-bit ELF file")
    try:
        sections = _sections(data)
        regs = _regcounts(data, sections)
        kernels = {}
        for section in sections.values():
            if section.name.startswith(".nv.info."):
                name = section.name[len(".nv.info."):]
                kernels[name] = _kernel(name, _attributes(data, section), regs.get(name))
        return kernels
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise CubinError(f"truncated or malformed ELF ({exc})") from None


def _sections(data: bytes) -> dict[str, _Section]:
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names_at = headers[names_index][4]
    found = {}
    for name_offset, _, _, _, offset, size, *_ in headers:
        name = _string(data, names_at + name_offset)
        found[name] = _Section(name, offset, size)
    return found


def _string(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode()


def _attributes(data: bytes, section: _Section) -> list[tuple[int, bytes]]:
    attrs = []
    at, end = section.offset, section.offset + section.size
    while at + 2 <= end:
        fmt, attr = data[at], data[at + 1]
        if fmt == 4:
            (size,) = struct.unpack_from("<H", data, at + 2)
            attrs.append((attr, data[at + 4:at + 4 + size]))
            at += 4 + size
        elif fmt in _FORMAT_SIZES:
            size = _FORMAT_SIZES[fmt]
            attrs.append((attr, data[at + 2:at + 2 + size]))
            at += 2 + size
        else:
            raise CubinError(f"unknown attribute format {fmt} in {section.name}")
    return attrs


def _kernel(name: str, attrs: list[tuple[int, bytes]], regs: int | None) -> CubinKernel:
    params, base, max_threads = {}, None, None
    for attr, value in attrs:
        if attr == _EIATTR_KPARAM_INFO:
            _, ordinal, offset, packed = struct.unpack_from("<IHHI", value)
            params[ordinal] = KernelParam(ordinal, offset, (packed >> 18) & 0x3FFF)
        elif attr == _EIATTR_PARAM_CBANK:
            _, base, _ = struct.unpack_from("<IHH", value)
        elif attr == _EIATTR_MAX_THREADS:
            x, y, z = struct.unpack_from("<III", value)
            max_threads = x * y * z
    return CubinKernel(name, tuple(params[i] for i in sorted(params)), base, max_threads, regs)


def _regcounts(data: bytes, sections: dict[str, _Section]) -> dict[str, int]:
    """``EIATTR_REGCOUNT`` entries (symbol index, registers) of the global ``.nv.info``, by symbol name."""
    info, symtab, strtab = sections.get(".nv.info"), sections.get(".symtab"), sections.get(".strtab")
    if info is None or symtab is None or strtab is None:
        return {}
    counts = {}
    for attr, value in _attributes(data, info):
        if attr == _EIATTR_REGCOUNT:
            index, count = struct.unpack_from("<II", value)
            (name_offset,) = struct.unpack_from("<I", data, symtab.offset + 24 * index)
            counts[_string(data, strtab.offset + name_offset)] = count
    return counts
