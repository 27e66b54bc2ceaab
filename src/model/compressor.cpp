#include "model/compressor.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "model/vector_ops.h"
#include "model/kv_quant.h"

namespace ds4::model {
namespace {

void check_params(const CompressorParams& p) {
  if (p.ratio == 0) fail("compressor: ratio must be >= 1");
  if (p.rope.n_rot == 0) fail("compressor: RoPE parameters are not set");
  if (p.head_dim < p.rope.n_rot) {
    fail("compressor: row width {} is smaller than the RoPE tail {}", p.head_dim, p.rope.n_rot);
  }
  const uint32_t d = p.head_dim;
  if (p.kind == CompressedRowKind::kIndexer &&
      (d % kFp4BlockSize != 0 || d > kMaxHadamardSize || (d & (d - 1)) != 0)) {
    fail("compressor: indexer rows must be a power-of-two multiple of {} wide, got {}",
         kFp4BlockSize, d);
  }
}

}  // namespace

void compressor_add_ape(std::span<float> score, std::span<const float> ape, uint32_t ratio,
                        uint32_t pos) {
  if (ratio == 0) fail("compressor_add_ape: ratio must be >= 1");
  if (score.empty() || ape.size() != score.size() * ratio) {
    fail("compressor_add_ape: APE has {} values, expected {} rows of {}", ape.size(), ratio,
         score.size());
  }
  const float* a = ape.data() + static_cast<size_t>(pos % ratio) * score.size();
  for (size_t j = 0; j < score.size(); ++j) score[j] += a[j];
}

void compressor_pool(std::span<const float> state_kv, std::span<const float> state_score,
                     uint32_t ratio, std::span<float> out) {
  const size_t d = out.size();
  const size_t coff = compressor_overlap(ratio);
  const size_t width = coff * d;
  const size_t n = coff * ratio * width;
  if (ratio == 0 || d == 0 || state_kv.size() != n || state_score.size() != n) {
    fail("compressor_pool: ratio {} rows of width {} need {} state values, got kv {} score {}",
         ratio, d, n, state_kv.size(), state_score.size());
  }
  const float* kv = state_kv.data();
  const float* sc = state_score.data();
  constexpr float kAllEmpty = kCompressorEmptyScore * 0.5f;
  for (size_t j = 0; j < d; ++j) {
    float max_score = kCompressorEmptyScore;
    float denom = 0.0f;
    float sum = 0.0f;
    if (ratio == 4) {
      // previous window: rows 0..3, first half; current window: rows 4..7, second half.
      for (size_t r = 0; r < 4; ++r) {
        max_score = std::max(max_score, sc[r * width + j]);
        max_score = std::max(max_score, sc[(4 + r) * width + d + j]);
      }
      if (max_score <= kAllEmpty) {
        out[j] = 0.0f;
        continue;
      }
      for (size_t r = 0; r < 4; ++r) {
        const size_t ip = r * width + j;
        const size_t ic = (4 + r) * width + d + j;
        const float wp = detail::exp_f32(sc[ip] - max_score);
        const float wc = detail::exp_f32(sc[ic] - max_score);
        denom += wp + wc;
        sum += wp * kv[ip];
        sum += wc * kv[ic];
      }
    } else {
      for (size_t r = 0; r < ratio; ++r) max_score = std::max(max_score, sc[r * width + j]);
      if (max_score <= kAllEmpty) {
        out[j] = 0.0f;
        continue;
      }
      for (size_t r = 0; r < ratio; ++r) {
        const float w = detail::exp_f32(sc[r * width + j] - max_score);
        denom += w;
        sum += w * kv[r * width + j];
      }
    }
    out[j] = denom > 0.0f ? sum / denom : 0.0f;
  }
}

void compressor_finish_row(std::span<float> row, std::span<const float> norm_weight,
                           const CompressorParams& params, uint32_t first_pos) {
  check_params(params);
  if (row.size() != params.head_dim) {
    fail("compressor_finish_row: row has {} values, expected {}", row.size(), params.head_dim);
  }
  rms_norm(row, norm_weight, row, params.eps);
  rope_tail(row, params.head_dim, params.rope, first_pos, /*inverse=*/false);
  if (params.kind == CompressedRowKind::kAttention) {
    fp8_kv_round_trip(row.first(params.head_dim - params.rope.n_rot));
  } else {
    indexer_qat_row(row);
  }
}

Compressor::Compressor(const CompressorParams& params)
    : params_(params),
      width_(static_cast<size_t>(compressor_overlap(params.ratio)) * params.head_dim),
      rows_(static_cast<size_t>(compressor_overlap(params.ratio)) * params.ratio) {
  check_params(params_);
  reset();
}

bool Compressor::push(std::span<const float> kv, std::span<const float> score, uint32_t pos,
                      std::span<const float> norm_weight, std::span<float> out_row) {
  if (kv.size() != width_ || score.size() != width_) {
    fail("compressor push: kv/score have {}/{} values, expected {}", kv.size(), score.size(),
         width_);
  }
  if (pos != n_tokens_) {
    fail("compressor push: position {} out of order, expected {}", pos, n_tokens_);
  }
  const uint32_t r = params_.ratio;
  const bool emit = (pos + 1) % r == 0;
  if (out_row.size() != params_.head_dim || norm_weight.size() != params_.head_dim) {
    fail("compressor push: out row / norm weight have {}/{} values, expected {}", out_row.size(),
         norm_weight.size(), params_.head_dim);
  }
  const size_t row = r == 4 ? 4 + pos % 4 : pos % r;
  std::copy(kv.begin(), kv.end(), kv_.begin() + row * width_);
  std::copy(score.begin(), score.end(), score_.begin() + row * width_);
  n_tokens_ = pos + 1;
  if (!emit) return false;

  compressor_pool(kv_, score_, r, out_row);
  compressor_finish_row(out_row, norm_weight, params_, pos + 1 - r);
  if (r == 4) {  // the finished window becomes the "previous" lane (rows 0..3) of the next one
    const size_t half = 4 * width_;
    std::copy(kv_.begin() + half, kv_.end(), kv_.begin());
    std::copy(score_.begin() + half, score_.end(), score_.begin());
  }
  return true;
}

void Compressor::finish_prefill() {
  const uint32_t r = params_.ratio;
  const size_t rem = n_tokens_ % r;
  const size_t first = r == 4 ? 4 + rem : rem;
  std::fill(kv_.begin() + first * width_, kv_.end(), 0.0f);
  std::fill(score_.begin() + first * width_, score_.end(), kCompressorEmptyScore);
}

void Compressor::restore(std::span<const float> state_kv, std::span<const float> state_score,
                         uint32_t n_tokens) {
  if (state_kv.size() != kv_.size() || state_score.size() != score_.size()) {
    fail("compressor restore: snapshot has kv {} / score {} values, expected {} each",
         state_kv.size(), state_score.size(), kv_.size());
  }
  std::copy(state_kv.begin(), state_kv.end(), kv_.begin());
  std::copy(state_score.begin(), state_score.end(), score_.begin());
  n_tokens_ = n_tokens;
}

void Compressor::reset() {
  kv_.assign(rows_ * width_, 0.0f);
  score_.assign(rows_ * width_, kCompressorEmptyScore);
  n_tokens_ = 0;
}

}  // namespace ds4::model
