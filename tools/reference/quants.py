"""Block dequantizers and activation-quantization simulations (spec §5, §3.1, §7.3).

All dequantizers take little-endian raw bytes (any buffer / uint8 array) and return a
flat float64 array of `n` elements; they are vectorised over blocks. Supported weight
types: F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS (and I32 read as exact integers).

Activation simulations reproduce what the engine does to the *input* of a quantized
matvec (spec §3.1): Q8_0 activations (blocks of 32) for Q8_0 weights and Q8_K activations
(blocks of 256) for routed-expert weights. They return the dequantized activation, so
`W_dequant @ act_roundtrip(x)` equals the engine's integer dot up to float rounding.
"""

import numpy as np

from .gguf import GGML_TYPES, GGUFError, TYPE_IDS
from .iq2xxs_grid import IQ2XXS_GRID

QK8_0 = 32
QK_K = 256

# IQ2_XXS grid as [256, 8] magnitudes (byte j of entry g is element j).
IQ2XXS_GRID_BYTES = np.array(
    [[(g >> (8 * j)) & 0xFF for j in range(8)] for g in IQ2XXS_GRID], dtype=np.float64)


def _ksigns():
    """ksigns_iq2xs (spec §5.5): i | 0x80 when popcount(i) is odd, else i (even parity)."""
    return np.array([i | 0x80 if bin(i).count("1") % 2 else i for i in range(128)], dtype=np.uint8)


KSIGNS_IQ2XS = _ksigns()


def _as_u8(buf):
    """Flat uint8 view of a byte buffer or numpy array (no copy when contiguous)."""
    if isinstance(buf, np.ndarray):
        return np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def _blocks(buf, n, type_name):
    tid = TYPE_IDS[type_name]
    _, be, bb = GGML_TYPES[tid]
    if n % be:
        raise GGUFError("%s needs a multiple of %d elements, got %d" % (type_name, be, n))
    nb = n // be
    u8 = _as_u8(buf)
    if u8.size < nb * bb:
        raise GGUFError("%s: %d elements need %d bytes, got %d" % (type_name, n, nb * bb, u8.size))
    return u8[:nb * bb].reshape(nb, bb)


def _f16_at(blk, off):
    return blk[:, off:off + 2].copy().view("<f2")[:, 0].astype(np.float64)


def dequant_f32(buf, n):
    return _as_u8(buf)[:4 * n].view("<f4").astype(np.float64)


def dequant_f16(buf, n):
    return _as_u8(buf)[:2 * n].view("<f2").astype(np.float64)


def dequant_bf16(buf, n):
    u = _as_u8(buf)[:2 * n].view("<u2").astype(np.uint32) << 16
    return u.view(np.float32).astype(np.float64)


def dequant_i32(buf, n):
    return _as_u8(buf)[:4 * n].view("<i4").astype(np.int64)


def dequant_q8_0(buf, n):
    """Q8_0 (spec §5.2): f16 d, int8 q[32]; x = d*q."""
    blk = _blocks(buf, n, "Q8_0")
    d = _f16_at(blk, 0)
    q = blk[:, 2:34].view(np.int8).astype(np.float64)
    return (d[:, None] * q).reshape(-1)


def dequant_q2_k(buf, n):
    """Q2_K (spec §5.3): scales[16], qs[64], f16 d, f16 dmin.

    Element i = 128k + 32s + l takes q = (qs[32k+l] >> 2s) & 3; sub-block i/16 has
    scale scales & 15 and min scales >> 4; x = d*sc*q - dmin*mn.
    """
    blk = _blocks(buf, n, "Q2_K")
    scales = blk[:, 0:16]
    qs = blk[:, 16:80].reshape(-1, 2, 1, 32)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    q = ((qs >> shifts) & 3).reshape(-1, 256).astype(np.float64)
    d = _f16_at(blk, 80)
    dmin = _f16_at(blk, 82)
    sc = np.repeat((scales & 15).astype(np.float64), 16, axis=1)
    mn = np.repeat((scales >> 4).astype(np.float64), 16, axis=1)
    return (d[:, None] * sc * q - dmin[:, None] * mn).reshape(-1)


def q4_k_scale_min(scales):
    """6-bit (scale, min) of the 8 Q4_K sub-blocks (spec §5.4); scales: [nb, 12] uint8.
    Returns two int arrays [nb, 8]."""
    s = scales.astype(np.int64)
    sc = np.empty((s.shape[0], 8), dtype=np.int64)
    mn = np.empty_like(sc)
    for j in range(4):
        sc[:, j] = s[:, j] & 63
        mn[:, j] = s[:, j + 4] & 63
    for j in range(4, 8):
        sc[:, j] = (s[:, j + 4] & 15) | ((s[:, j - 4] >> 6) << 4)
        mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc, mn


def dequant_q4_k(buf, n):
    """Q4_K (spec §5.4): f16 d, f16 dmin, scales[12], qs[128].

    Elements 64c + l use the low nibble of qs[32c + l], 64c + 32 + l the high nibble;
    sub-block j = element/32; x = d*sc_j*q - dmin*mn_j.
    """
    blk = _blocks(buf, n, "Q4_K")
    d = _f16_at(blk, 0)
    dmin = _f16_at(blk, 2)
    sc, mn = q4_k_scale_min(blk[:, 4:16])
    qs = blk[:, 16:144].reshape(-1, 4, 1, 32)
    q = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(-1, 256).astype(np.float64)
    scf = np.repeat(sc.astype(np.float64), 32, axis=1)
    mnf = np.repeat(mn.astype(np.float64), 32, axis=1)
    return (d[:, None] * scf * q - dmin[:, None] * mnf).reshape(-1)


def dequant_iq2_xxs(buf, n):
    """IQ2_XXS (spec §5.5): f16 d, then 8 sub-blocks of (u32 a0, u32 a1).

    Group k (elements 8k..8k+7 of a sub-block) uses grid entry byte k of a0, sign mask
    ksigns[(a1 >> 7k) & 127], scale ls = a1 >> 28; x = d*(0.5+ls)*0.25*grid*sign.
    """
    blk = _blocks(buf, n, "IQ2_XXS")
    nb = blk.shape[0]
    d = _f16_at(blk, 0)
    sub = blk[:, 2:66].reshape(nb, 8, 8)
    gidx = sub[:, :, 0:4]                                  # [nb, 8 sub, 4 groups]
    a1 = sub[:, :, 4:8].copy().view("<u4")[:, :, 0].astype(np.int64)  # [nb, 8]
    ls = (a1 >> 28).astype(np.float64)
    sidx = np.stack([(a1 >> (7 * k)) & 127 for k in range(4)], axis=2)  # [nb, 8, 4]
    masks = KSIGNS_IQ2XS[sidx]                              # [nb, 8, 4]
    bits = (masks[..., None] >> np.arange(8, dtype=np.uint8)) & 1  # [nb, 8, 4, 8]
    sign = 1.0 - 2.0 * bits.astype(np.float64)
    mag = IQ2XXS_GRID_BYTES[gidx]                           # [nb, 8, 4, 8]
    scale = d[:, None] * (0.5 + ls) * 0.25                  # [nb, 8]
    return (scale[:, :, None, None] * mag * sign).reshape(-1)


_DEQUANT = {
    "F32": dequant_f32, "F16": dequant_f16, "BF16": dequant_bf16, "Q8_0": dequant_q8_0,
    "Q2_K": dequant_q2_k, "Q4_K": dequant_q4_k, "IQ2_XXS": dequant_iq2_xxs,
    "I32": dequant_i32,
}

SUPPORTED_WEIGHT_TYPES = tuple(_DEQUANT)


def dequantize(buf, type_id, n):
    """Dequantize `n` elements of ggml type `type_id` from raw bytes to float64 (I32 gives
    int64). GGUFError for types outside SUPPORTED_WEIGHT_TYPES or short buffers."""
    if type_id not in GGML_TYPES:
        raise GGUFError("unknown ggml type %d" % type_id)
    name = GGML_TYPES[type_id][0]
    if name not in _DEQUANT:
        raise GGUFError("no dequantizer for type %s (supported: %s)" % (name, ", ".join(SUPPORTED_WEIGHT_TYPES)))
    _, be, bb = GGML_TYPES[type_id]
    need = (n + be - 1) // be * bb
    if _as_u8(buf).size < need:
        raise GGUFError("%s: %d elements need %d bytes, got %d" % (name, n, need, _as_u8(buf).size))
    return _DEQUANT[name](buf, n)


# ---------------------------------------------------------------------------------------
# Quantizers used to build test files (not part of the forward pass).

def quantize_q8_0(x):
    """Q8_0 weight quantizer (spec §5.2): per 32-block d = amax/127 (stored f16),
    q = round(x/d) with ties away from zero. x: float array, size multiple of 32.
    Returns raw uint8 bytes."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, QK8_0)
    amax = np.abs(x).max(axis=1)
    d = amax / np.float32(127)
    idd = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    v = x * idd[:, None]
    q = np.clip(np.sign(v) * np.floor(np.abs(v) + np.float32(0.5)), -128, 127).astype(np.int8)
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def f32_to_bf16_bits(x):
    """Round-to-nearest-even f32 -> bf16 bit patterns (uint16); NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, np.uint16(0x7FC0), r).astype(np.uint16)


# ---------------------------------------------------------------------------------------
# Activation-quantization simulations (spec §3.1, §5.6, §7.3).

def q8_0_activation(x):
    """Q8_0 activation quantization of the last axis (multiple of 32), spec §3.1.

    Per block (f32 arithmetic, as the engine): d = max|x|/127, q = clamp(rint(x*(1/d)),
    -128, 127) with round-half-even, q = 0 when d = 0. Returns (d [..., nb] float32,
    q [..., nb, 32] int8)."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1] % QK8_0:
        raise GGUFError("Q8_0 activation needs a multiple of 32 values, got %d" % x.shape[-1])
    xb = x.reshape(x.shape[:-1] + (-1, QK8_0))
    amax = np.abs(xb).max(axis=-1)
    d = (amax / np.float32(127)).astype(np.float32)
    safe = np.where(d > 0, d, np.float32(1))
    idd = np.where(d > 0, np.float32(1) / safe, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(xb * idd[..., None]), -128, 127).astype(np.int8)
    return d, q


def q8_0_activation_roundtrip(x):
    """Dequantized Q8_0 activation (float64, same shape as x)."""
    x = np.asarray(x)
    d, q = q8_0_activation(x)
    return (d.astype(np.float64)[..., None] * q.astype(np.float64)).reshape(x.shape)


def q8_k_activation(x):
    """Q8_K activation quantization (spec §5.6) of the last axis (multiple of 256).

    Per block: max = the signed element of largest |x| (first one on ties);
    iscale = -127/max; q = clamp(rint(iscale*x), -128, 127) (round-half-even);
    d = 1/iscale; an all-zero block gives d = 0, q = 0. f32 arithmetic.
    Returns (d [..., nb] float32, q [..., nb, 256] int8, bsums [..., nb, 16] int16)."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1] % QK_K:
        raise GGUFError("Q8_K activation needs a multiple of 256 values, got %d" % x.shape[-1])
    xb = x.reshape(x.shape[:-1] + (-1, QK_K))
    idx = np.abs(xb).argmax(axis=-1)
    mx = np.take_along_axis(xb, idx[..., None], axis=-1)[..., 0]
    zero = mx == 0
    safe = np.where(zero, np.float32(1), mx)
    iscale = (np.float32(-127) / safe).astype(np.float32)
    q = np.clip(np.rint(xb * iscale[..., None]), -128, 127)
    q = np.where(zero[..., None], 0, q).astype(np.int8)
    d = np.where(zero, np.float32(0), np.float32(1) / iscale).astype(np.float32)
    bsums = q.astype(np.int16).reshape(q.shape[:-1] + (16, 16)).sum(axis=-1).astype(np.int16)
    return d, q, bsums


def q8_k_activation_roundtrip(x):
    """Dequantized Q8_K activation (float64, same shape as x)."""
    x = np.asarray(x)
    d, q, _ = q8_k_activation(x)
    return (d.astype(np.float64)[..., None] * q.astype(np.float64)).reshape(x.shape)


# Which activation simulation a weight type implies (spec §3.1): Q8_0 weights take Q8_0
# activations, routed K/IQ quants take Q8_K, float weights take none.
ACTIVATION_QUANT_FOR_TYPE = {
    "Q8_0": q8_0_activation_roundtrip,
    "Q2_K": q8_k_activation_roundtrip,
    "Q4_K": q8_k_activation_roundtrip,
    "IQ2_XXS": q8_k_activation_roundtrip,
}
