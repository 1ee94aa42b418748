"""Deterministic noise for the simulator: a pure function of (seed, stream, time), never of call order.

History written in one run and live series served by another agree to the last digit because
every random-looking value is a hash of where and when it is drawn, not the next draw of a PRNG.
"""

from __future__ import annotations

import hashlib
import math

_MASK = (1 << 64) - 1


def stream(*parts: object) -> int:
    """A stable 64-bit id for a named stream (seed, pod name, channel...)."""
    digest = hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def unit(key: int, when: float) -> float:
    """Uniform in [0, 1) for this stream at this moment (splitmix64 of the key and the millisecond)."""
    z = (key + round(when * 1000) * 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


def jitter(key: int, when: float, spread: float) -> float:
    """A multiplicative factor around 1 (±spread, triangular so extremes are rare)."""
    return 1.0 + spread * (unit(key, when) + unit(key ^ 0x5BD1E995, when) - 1.0)


def normal(key: int, when: float) -> float:
    """A standard normal draw (Box-Muller on two uniforms of the stream)."""
    u1 = max(unit(key, when), 1e-12)
    u2 = unit(key ^ 0x2545F4914F6CDD1D, when)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
