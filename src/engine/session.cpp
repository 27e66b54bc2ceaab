#include "engine/session.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace ds4 {
namespace {

constexpr uint32_t kPayloadMagic = 0x34565344;  // "DSV4" little-endian
constexpr uint32_t kPayloadVersion = 1;

class ByteWriter {
 public:
  void u32(uint32_t v) { raw(&v, 4); }
  void f32s(std::span<const float> v) { raw(v.data(), v.size() * 4); }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  std::vector<uint8_t> out;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
  uint32_t u32(const char* what) {
    uint32_t v;
    raw(&v, 4, what);
    return v;
  }
  void f32s(std::span<float> v, const char* what) { raw(v.data(), v.size() * 4, what); }
  void raw(void* p, size_t n, const char* what) {
    if (in_.size() - pos_ < n)
      fail("session payload truncated at byte {} while reading {} ({} bytes needed, {} left)", pos_,
           what, n, in_.size() - pos_);
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  size_t left() const { return in_.size() - pos_; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace

Session::Session(const model::Config& config, Backend& backend, int64_t ctx)
    : config_(config), ctx_(ctx), backend_(backend.new_session(ctx)), logits_(config.n_vocab) {}

void Session::prefill(std::span<const int32_t> tokens, int64_t chunk, const ProgressFn& progress) {
  if (tokens.empty()) return;
  const auto total = static_cast<int64_t>(tokens.size());
  if (static_cast<int64_t>(tokens_.size()) + total > ctx_)
    fail("prompt of {} tokens does not fit: the session holds {} of {} context tokens",
         total, tokens_.size(), ctx_);
  const int64_t step = chunk > 0 ? chunk : total;
  for (int64_t done = 0; done < total;) {
    const int64_t n = std::min(step, total - done);
    const auto pos0 = static_cast<int64_t>(tokens_.size());
    backend_->eval(tokens.subspan(static_cast<size_t>(done), static_cast<size_t>(n)), pos0, logits_, {});
    tokens_.insert(tokens_.end(), tokens.begin() + done, tokens.begin() + done + n);
    have_logits_ = true;
    done += n;
    if (progress) progress(done, total);
  }
}

void Session::prefill_each(std::span<const int32_t> tokens, int64_t chunk,
                           const std::function<void(int64_t, std::span<const float>)>& each) {
  if (tokens.empty()) return;
  const auto total = static_cast<int64_t>(tokens.size());
  if (static_cast<int64_t>(tokens_.size()) + total > ctx_)
    fail("text of {} tokens does not fit: the session holds {} of {} context tokens", total, tokens_.size(), ctx_);
  const int64_t step = chunk > 0 ? chunk : total;
  const size_t nv = config_.n_vocab;
  std::vector<float> all;
  for (int64_t done = 0; done < total;) {
    const int64_t n = std::min(step, total - done);
    all.resize(static_cast<size_t>(n) * nv);
    backend_->eval(tokens.subspan(static_cast<size_t>(done), static_cast<size_t>(n)),
                   static_cast<int64_t>(tokens_.size()), logits_, all);
    tokens_.insert(tokens_.end(), tokens.begin() + done, tokens.begin() + done + n);
    have_logits_ = true;
    for (int64_t i = 0; i < n; ++i) each(done + i, std::span<const float>(all).subspan(static_cast<size_t>(i) * nv, nv));
    done += n;
  }
}

int64_t Session::sync(std::span<const int32_t> prompt, int64_t chunk, const ProgressFn& progress) {
  size_t common = 0;
  while (common < tokens_.size() && common < prompt.size() && tokens_[common] == prompt[common])
    ++common;
  // Always re-evaluate at least one token so the logits belong to the prompt's last token.
  if (common == prompt.size() && common > 0) --common;
  int64_t kept = static_cast<int64_t>(common);
  if (common < tokens_.size()) kept = rewind(static_cast<int64_t>(common), chunk);
  const size_t n = prompt.size();
  if (checkpointing_ && n >= 2 && tokens_.size() <= n - 1 &&
      checkpoint_tokens_ != static_cast<int64_t>(n - 1)) {
    if (tokens_.size() < n - 1)
      prefill(prompt.subspan(tokens_.size(), n - 1 - tokens_.size()), chunk, progress);
    if (!checkpoint_) checkpoint_ = std::make_unique<model::KvState>(config_, ctx_);
    backend_->export_state(*checkpoint_);
    checkpoint_tokens_ = static_cast<int64_t>(tokens_.size());
  }
  prefill(prompt.subspan(tokens_.size()), chunk, progress);
  return kept;
}

int64_t Session::rewind(int64_t n, int64_t chunk) {
  if (n < 0 || n > static_cast<int64_t>(tokens_.size()))
    fail("cannot rewind a session of {} tokens to {}", tokens_.size(), n);
  if (n == static_cast<int64_t>(tokens_.size())) return n;
  // Invariant: the checkpoint's tokens are a prefix of tokens_ (tokens_ only grows between
  // checkpoints; reset and load drop the checkpoint).
  const int64_t from = checkpoint_ && checkpoint_tokens_ <= n ? checkpoint_tokens_ : 0;
  std::vector<int32_t> keep(tokens_.begin() + from, tokens_.begin() + n);
  if (from > 0) {
    backend_->import_state(*checkpoint_);
    tokens_.resize(static_cast<size_t>(from));
    have_logits_ = false;
  } else {
    reset();
  }
  prefill(keep, chunk);
  return from;
}

void Session::reset() {
  backend_->reset();
  tokens_.clear();
  have_logits_ = false;
  checkpoint_tokens_ = 0;
}

void Session::set_checkpointing(bool on) {
  checkpointing_ = on;
  if (!on) {
    checkpoint_.reset();
    checkpoint_tokens_ = 0;
  }
}

std::span<const float> Session::logits() const {
  if (!have_logits_) return {};
  return logits_;
}

std::vector<uint8_t> Session::save() const {
  model::KvState kv(config_, ctx_);
  backend_->export_state(kv);
  const auto N = static_cast<uint32_t>(tokens_.size());
  const uint32_t raw_window = std::min<uint32_t>(config_.n_swa, static_cast<uint32_t>(ctx_));
  const uint32_t live = std::min(raw_window, N);
  const size_t HD = config_.head_dim, ID = config_.indexer_head_dim;
  ByteWriter w;
  for (uint32_t v : {kPayloadMagic, kPayloadVersion, static_cast<uint32_t>(ctx_), 0u, kv.raw_cap(),
                     raw_window, static_cast<uint32_t>(ctx_ / 4 + 2), N, config_.n_layer,
                     config_.head_dim, config_.indexer_head_dim, config_.n_vocab, live})
    w.u32(v);
  w.raw(tokens_.data(), tokens_.size() * 4);
  if (have_logits_) {
    w.f32s(logits_);
  } else {
    std::vector<float> zeros(config_.n_vocab, 0.0f);
    w.f32s(zeros);
  }
  for (const auto& L : kv.layers()) w.u32(static_cast<uint32_t>(L.comp.size() / HD));
  for (const auto& L : kv.layers()) w.u32(static_cast<uint32_t>(L.index.size() / ID));
  for (const auto& L : kv.layers()) {
    for (uint32_t i = 0; i < live; ++i) {
      const uint64_t pos = N - live + i;
      w.f32s({&L.raw[(pos % kv.raw_cap()) * HD], HD});
    }
    auto write_compressor = [&](const std::vector<float>& rows, const model::Compressor& state) {
      w.f32s(rows);
      w.f32s(state.state_kv());
      w.f32s(state.state_score());
    };
    if (L.ratio != 0) write_compressor(L.comp, *L.comp_state);
    if (L.ratio == 4) write_compressor(L.index, *L.index_state);
  }
  return std::move(w.out);
}

void Session::load(std::span<const uint8_t> payload) {
  ByteReader r(payload);
  const uint32_t magic = r.u32("magic");
  if (magic != kPayloadMagic) fail("session payload: bad magic 0x{:08x} (expected \"DSV4\")", magic);
  const uint32_t version = r.u32("version");
  if (version != kPayloadVersion) fail("session payload: unsupported version {} (expected 1)", version);
  const uint32_t saved_ctx = r.u32("ctx");
  r.u32("prefill chunk");  // our prefill is chunk-invariant: any value is accepted
  const uint32_t raw_cap = r.u32("raw ring capacity");
  const uint32_t raw_window = r.u32("raw window");
  r.u32("compressed capacity");
  const uint32_t N = r.u32("token count");
  const uint32_t n_layer = r.u32("layer count");
  const uint32_t head_dim = r.u32("head dim");
  const uint32_t index_dim = r.u32("indexer dim");
  const uint32_t vocab = r.u32("vocab");
  const uint32_t live = r.u32("live raw rows");
  (void)raw_cap;
  if (n_layer != config_.n_layer || head_dim != config_.head_dim ||
      index_dim != config_.indexer_head_dim || vocab != config_.n_vocab)
    fail("session payload was written for another model shape (layers {}, head dim {}, indexer "
         "dim {}, vocab {}; this model has {}, {}, {}, {})",
         n_layer, head_dim, index_dim, vocab, config_.n_layer, config_.head_dim,
         config_.indexer_head_dim, config_.n_vocab);
  const uint32_t my_window = std::min<uint32_t>(config_.n_swa, static_cast<uint32_t>(ctx_));
  if (raw_window != std::min<uint32_t>(config_.n_swa, saved_ctx) || raw_window != my_window)
    fail("session payload has a raw window of {} rows; this session uses {}", raw_window, my_window);
  if (N >= ctx_) fail("session payload holds {} tokens; the context of {} is too small", N, ctx_);
  if (live != std::min(raw_window, N)) fail("session payload: {} live raw rows for {} tokens", live, N);
  (void)saved_ctx;

  std::vector<int32_t> tokens(N);
  r.raw(tokens.data(), size_t{N} * 4, "token ids");
  for (int32_t t : tokens)
    if (t < 0 || static_cast<uint32_t>(t) >= config_.n_vocab)
      fail("session payload: token id {} is outside the vocabulary", t);
  std::vector<float> logits(config_.n_vocab);
  r.f32s(logits, "logits");
  std::vector<uint32_t> n_comp(n_layer), n_index(n_layer);
  for (auto& v : n_comp) v = r.u32("compressed row counts");
  for (auto& v : n_index) v = r.u32("indexer row counts");

  model::KvState kv(config_, ctx_);
  const size_t HD = head_dim, ID = index_dim;
  for (uint32_t il = 0; il < n_layer; ++il) {
    auto& L = kv.layers()[il];
    for (uint32_t i = 0; i < live; ++i) {
      const uint64_t pos = N - live + i;
      r.f32s({&L.raw[(pos % kv.raw_cap()) * HD], HD}, "raw rows");
    }
    const uint32_t ratio = L.ratio;
    const uint32_t expect_comp = ratio ? N / ratio : 0;
    if (n_comp[il] != expect_comp || n_index[il] != (ratio == 4 ? expect_comp : 0))
      fail("session payload: layer {} has {} compressed / {} indexer rows, expected {} for {} "
           "tokens", il, n_comp[il], n_index[il], expect_comp, N);
    // Compressed rows, then the frontier (kv, score) of the compressor that produced them.
    auto read_compressor = [&](std::vector<float>& rows, size_t n_rows, size_t width,
                               model::Compressor& state, const char* what) {
      rows.resize(n_rows * width);
      r.f32s(rows, what);
      std::vector<float> skv(state.state_kv().size()), ssc(skv.size());
      r.f32s(skv, what);
      r.f32s(ssc, what);
      state.restore(skv, ssc, N);
    };
    if (ratio != 0) read_compressor(L.comp, n_comp[il], HD, *L.comp_state, "compressed rows");
    if (ratio == 4) read_compressor(L.index, n_index[il], ID, *L.index_state, "indexer rows");
  }
  if (r.left() != 0) fail("session payload has {} unexpected trailing bytes", r.left());
  backend_->import_state(kv);
  tokens_ = std::move(tokens);
  checkpoint_tokens_ = 0;
  logits_ = std::move(logits);
  have_logits_ = N > 0;
}

}  // namespace ds4
