// Per-session model state (spec §4.1): for every layer the raw sliding-window ring, the
// compressed attention rows and the attention compressor frontier (ratio != 0), and for
// ratio-4 layers the indexer rows and indexer compressor frontier. Host f32 storage; this is
// also the backend-neutral form that snapshots (spec §4.3) are written from and read into.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/compressor.h"
#include "model/config.h"

namespace ds4::model {

/// State of one layer. Values stored are what attention reads: raw and compressed rows are
/// rounded to f16 on store (spec §7.2, CPU reference).
struct LayerKv {
  uint32_t ratio = 0;
  std::vector<float> raw;             ///< raw_cap x head_dim; position p lives in row p % raw_cap
  std::vector<float> comp;            ///< n_comp x head_dim, appended in order
  std::optional<Compressor> comp_state;
  std::vector<float> index;           ///< n_index x indexer_head_dim (ratio 4 only)
  std::optional<Compressor> index_state;

  size_t n_comp(uint32_t head_dim) const { return comp.size() / head_dim; }
};

/// Memory plan of a session of `ctx` tokens (bytes); see KvState::estimate.
struct KvEstimate {
  uint64_t raw_bytes = 0;         ///< raw rings of all layers
  uint64_t compressed_bytes = 0;  ///< compressed + indexer rows at full ctx
  uint64_t frontier_bytes = 0;    ///< compressor frontiers
  uint64_t total() const { return raw_bytes + compressed_bytes + frontier_bytes; }
  uint32_t raw_cap = 0;           ///< raw rows per layer: min(sliding window, ctx)
};

/// The KV/compressor/indexer state of a session of up to `ctx` tokens.
class KvState {
 public:
  /// Allocates the rings and frontiers and reserves compressed rows for ctx/R + 2 rows per
  /// layer. Throws ds4::Error when ctx < 1 or the memory cannot be allocated.
  KvState(const Config& config, int64_t ctx);

  /// Bytes a session of `ctx` tokens needs (what the constructor allocates, spec §4.1).
  static KvEstimate estimate(const Config& config, int64_t ctx);
  /// The same plan for layer `il` alone (the sum over layers is estimate()); used to place
  /// layers on devices. Throws ds4::Error if il >= n_layer.
  static KvEstimate estimate_layer(const Config& config, uint32_t il, int64_t ctx);

  /// Forgets every token (rings zeroed, compressors reset).
  void reset();

  int64_t ctx() const { return ctx_; }
  uint32_t raw_cap() const { return raw_cap_; }
  std::vector<LayerKv>& layers() { return layers_; }
  const std::vector<LayerKv>& layers() const { return layers_; }

 private:
  int64_t ctx_;
  uint32_t raw_cap_;
  std::vector<LayerKv> layers_;
};

/// Compressor parameters of layer `il` of `config`: attention (D = head_dim) or indexer
/// (D = indexer_head_dim) kind, with the layer's RoPE.
CompressorParams compressor_params(const Config& config, uint32_t il, CompressedRowKind kind);

/// RoPE settings of `config` (spec §1.3 keys) for rope_params_for_layer().
RopeConfig rope_config(const Config& config);

}  // namespace ds4::model
