"""KV-cache quantization simulations that are part of the model (spec §3.4.4, §3.4.7, §7.1-2).

* FP8 E4M3FN round trip with power-of-two block scales (raw KV rows, attention compressed
  rows; non-RoPE dims only).
* Walsh-Hadamard transform + FP4 E2M1 round trip (indexer queries and indexer compressed
  rows).
* f16 storage rounding of cached rows.

All functions take float64 arrays, operate on the last axis, and return new float64 arrays.
"""

import numpy as np

FP8_MAX = 448.0
FP8_BLOCK = 64
FP8_AMAX_FLOOR = 1e-4
FP4_MAX = 6.0
FP4_BLOCK = 32
FP4_AMAX_FLOOR = 7.052966104933725e-38


def _e4m3fn_table():
    """Non-negative E4M3FN values by index 0..126 (spec §3.4.4); index 126 = 448."""
    t = []
    for i in range(127):
        e, m = (i >> 3) & 15, i & 7
        t.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))
    return np.array(t)


E4M3FN_TABLE = _e4m3fn_table()
E2M1_TABLE = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def round_to_table(v, table):
    """Round each |v| to the nearest entry of the ascending non-negative `table`
    (ties to the even index), then restore the sign. |v| must be <= table[-1]."""
    a = np.abs(v)
    lo = np.searchsorted(table, a, side="right") - 1      # largest entry <= a
    lo = np.clip(lo, 0, len(table) - 1)
    hi = np.minimum(lo + 1, len(table) - 1)
    dlo = a - table[lo]
    dhi = table[hi] - a
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return np.copysign(table[pick], v)


def pow2_ceil(r):
    """2^ceil(log2(r)) for r > 0, computed exactly (frexp) rather than via log2."""
    m, e = np.frexp(r)
    return np.ldexp(1.0, np.where(m == 0.5, e - 1, e).astype(np.int64))


def _blockwise(x, n_dims, block, fn):
    """Apply fn(block_values) to consecutive blocks of `block` dims of x[..., :n_dims]
    (the last block may be shorter); dims >= n_dims are copied unchanged."""
    y = np.array(x, dtype=np.float64, copy=True)
    for s in range(0, n_dims, block):
        e = min(s + block, n_dims)
        y[..., s:e] = fn(y[..., s:e])
    return y


def fp8_e4m3_block(v):
    """FP8 E4M3FN round trip of one block (last axis): amax floored at 1e-4,
    scale = 2^ceil(log2(amax/448)), clamp to +-448, nearest E4M3FN value, times scale."""
    amax = np.maximum(np.abs(v).max(axis=-1, keepdims=True), FP8_AMAX_FLOOR)
    scale = pow2_ceil(amax / FP8_MAX)
    q = round_to_table(np.clip(v / scale, -FP8_MAX, FP8_MAX), E4M3FN_TABLE)
    return q * scale


def fp8_kv_simulate(x, n_nope):
    """FP8 KV simulation of a KV row (spec §3.4.4): dims [0, n_nope) in blocks of 64
    (a trailing partial block when n_nope % 64 != 0); the RoPE tail is untouched."""
    return _blockwise(x, n_nope, FP8_BLOCK, fp8_e4m3_block)


def hadamard(x):
    """Sylvester/Walsh-Hadamard transform of the last axis (length a power of two) with the
    butterfly of spec §3.4.7 (strides 1, 2, 4, ...), scaled by 1/sqrt(n)."""
    x = np.array(x, dtype=np.float64, copy=True)
    n = x.shape[-1]
    if n & (n - 1) or n == 0:
        raise ValueError("Hadamard length %d is not a power of two" % n)
    lead = x.shape[:-1]
    s = 1
    while s < n:
        y = x.reshape(lead + (n // (2 * s), 2, s))
        a, b = y[..., 0, :], y[..., 1, :]
        x = np.stack([a + b, a - b], axis=-2).reshape(lead + (n,))
        s *= 2
    return x * (1.0 / np.sqrt(n))


def fp4_e2m1_block(v):
    """FP4 E2M1 round trip of one block: amax floored at 7.052966104933725e-38,
    scale = 2^ceil(log2(amax/6)), clamp to +-6, nearest of {0,.5,1,1.5,2,3,4,6}
    (ties to the even index), times scale."""
    amax = np.maximum(np.abs(v).max(axis=-1, keepdims=True), FP4_AMAX_FLOOR)
    scale = pow2_ceil(amax / FP4_MAX)
    q = round_to_table(np.clip(v / scale, -FP4_MAX, FP4_MAX), E2M1_TABLE)
    return q * scale


def fp4_blocks(y):
    """FP4 simulation of the last axis in blocks of 32 (its length must be a multiple of 32):
    the rounding step of indexer_qat, applied after the Hadamard transform."""
    n = y.shape[-1]
    if n % FP4_BLOCK:
        raise ValueError("indexer row length %d is not a multiple of 32" % n)
    return _blockwise(y, n, FP4_BLOCK, fp4_e2m1_block)


def indexer_qat(x):
    """Indexer quantization-aware transform (spec §3.4.7 step 3): Hadamard over the whole
    last axis, then FP4 simulation in blocks of 32 (last axis must be a multiple of 32)."""
    if x.shape[-1] % FP4_BLOCK:
        raise ValueError("indexer row length %d is not a multiple of 32" % x.shape[-1])
    return fp4_blocks(hadamard(x))


def round_f16(x):
    """Round to IEEE half (round-to-nearest-even) and back to float64 (spec §7.2)."""
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)
