// Quantisation round trips that are part of the DeepSeek V4 graph (model-spec §3.4.4, §3.4.7,
// §7 item 1): FP8 E4M3FN on the non-RoPE part of every attention KV row, and a 128-point
// Hadamard rotation followed by FP4 E2M1 on indexer queries and indexer compressed rows.
// Values are quantised and immediately dequantised ("simulation"): f32 in, f32 out, in place.
//
// Both formats use one power-of-two scale per block: scale = 2^ceil(log2f(amax / qmax)) with
// f32 log2f as in the reference, amax floored (FP8: 1e-4, FP4: 6 * 2^-126). x / scale is
// then clamped to +-qmax and rounded to the nearest grid value, exact ties going to the value
// with the even index (E4M3FN indices 0..126, E2M1 indices 0..7); the sign is reapplied
// (a negative input that rounds to 0 gives -0). A block holding inf or NaN throws ds4::Error.
// Values of magnitude above ~3e38 can round up to 2^128 = inf, as in the reference.
#pragma once

#include <cstddef>
#include <span>

namespace ds4::model {

inline constexpr size_t kFp8BlockSize = 64;   ///< FP8 KV block (spec §3.4.4)
inline constexpr size_t kFp4BlockSize = 32;   ///< FP4 activation block (spec §3.4.7)
inline constexpr size_t kHadamardSize = 128;  ///< indexer Hadamard width of the real model (spec §3.4.7)
inline constexpr size_t kMaxHadamardSize = 4096;  ///< largest Hadamard width accepted
inline constexpr float kE4m3Max = 448.0f;     ///< largest finite E4M3FN value (index 126)
inline constexpr float kE2m1Max = 6.0f;       ///< largest E2M1 value (index 7)

/// E4M3FN value of index i in [0, 126]: e = i >> 3, m = i & 7; e == 0 ? m * 2^-9 : (1 + m/8) * 2^(e-7).
/// Throws ds4::Error for an index outside [0, 126].
float e4m3fn_value(int index);

/// Rounds v to the nearest E4M3FN value (|v| clamped to 448 first), ties to the even index,
/// sign kept. Equivalent to the reference's binary search over the 127-entry table.
/// NaN input throws ds4::Error.
float e4m3fn_round(float v);

/// E2M1 value of index i in [0, 7]: {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Throws for other indices.
float e2m1_value(int index);

/// Rounds v to the nearest E2M1 value (|v| clamped to 6 first), ties to the even index,
/// sign kept. NaN input throws ds4::Error.
float e2m1_round(float v);

/// FP8 KV simulation in place (spec §3.4.4) on consecutive blocks of 64 values. Pass the
/// non-RoPE part of a row (dims 0..447 of a 512-wide KV row: 7 blocks). A trailing partial
/// block (small test shapes only) is scaled on its own, as the Python reference does.
/// Throws ds4::Error when a block is not finite.
void fp8_kv_round_trip(std::span<float> x);

/// Walsh-Hadamard transform in place: Sylvester butterflies with strides 1, 2, ..., n/2
/// ((a, b) -> (a + b, a - b)), then every value times 1/sqrt(n) (for n = 128:
/// 0.08838834764831845f, spec §3.4.7 step 3). Orthonormal: applying it twice gives x back up
/// to rounding. Throws ds4::Error when n = x.size() is not a power of two in [2, 4096].
void hadamard(std::span<float> x);

/// FP4 E2M1 simulation in place (spec §3.4.7 step 3) on consecutive blocks of 32 values.
/// Throws ds4::Error when x.size() is not a multiple of 32 or a block is not finite.
void fp4_round_trip(std::span<float> x);

/// Indexer quantisation-aware row: hadamard then fp4_round_trip, in place, on one indexer
/// query head or indexer compressed row (128 wide in the real model; spec §3.4.7 step 3).
/// Throws ds4::Error when x.size() is not a power-of-two multiple of 32 or a value is not finite.
void indexer_qat_row(std::span<float> x);

}  // namespace ds4::model
