"""FP8 E4M3 and BF16 as numpy bit patterns: draw, encode, decode.

numpy has neither type, so host arrays hold their bits (``uint8`` / ``uint16``) and
these helpers convert to and from float32 for references and checks.
"""

from __future__ import annotations

import numpy as np


def _e4m3_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.uint32)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = codes & 0x7
    normal = (1.0 + man / 8.0) * np.exp2(exp.astype(np.float64) - 7.0)
    subnormal = (man / 8.0) * np.exp2(-6.0)
    value = sign * np.where(exp == 0, subnormal, normal)
    value[(codes & 0x7F) == 0x7F] = np.nan  # E4M3 has no infinities, only NaN
    return value.astype(np.float32)


E4M3_TO_F32 = _e4m3_table()


def fp8_to_f32(bits: np.ndarray) -> np.ndarray:
    """Decode E4M3 bit patterns (uint8) to float32."""
    return E4M3_TO_F32[bits]


def _fp8_from_byte(max_abs: float) -> np.ndarray:
    """A byte -> E4M3 code table over the nonzero finite codes with |value| <= max_abs."""
    finite = np.flatnonzero(np.abs(np.nan_to_num(E4M3_TO_F32, nan=np.inf)) <= max_abs)
    finite = finite[E4M3_TO_F32[finite] != 0]  # no zeros: they hide unwritten outputs
    return finite[(np.arange(256) * finite.size) // 256].astype(np.uint8)


def random_fp8(rng: np.random.Generator, shape, max_abs: float = 1.0) -> np.ndarray:
    """Random E4M3 bit patterns with |value| <= max_abs, never NaN or zero.

    Drawn as random bytes through a 256-entry table, so inputs of hundreds of MB come at
    memory speed.
    """
    return _fp8_from_byte(max_abs)[rng.integers(0, 256, size=shape, dtype=np.uint8)]


def f32_to_fp8(values: np.ndarray) -> np.ndarray:
    """Encode float32 to the nearest E4M3 bit pattern (exact for small integers)."""
    table = np.nan_to_num(E4M3_TO_F32, nan=np.inf)
    order = np.argsort(table)
    sorted_vals = table[order]
    idx = np.clip(np.searchsorted(sorted_vals, values), 1, len(sorted_vals) - 1)
    left, right = sorted_vals[idx - 1], sorted_vals[idx]
    pick = np.where(np.abs(values - left) <= np.abs(values - right), idx - 1, idx)
    return order[pick].astype(np.uint8)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Decode BF16 bit patterns (uint16) to float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Encode float32 to BF16 bit patterns with round-to-nearest-even."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


#: the 16-bit pattern written over outputs before a checked launch: a BF16 NaN
POISON_BF16 = 0x7FC1
