#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace ds4::tok {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "unknown PCRE2 error" : std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// Per-call match data (one ovector pair), so split() is thread-safe.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  MatchScratch() {
    if (!data) fail("pre-tokenizer: out of memory creating PCRE2 match data");
  }
  ~MatchScratch() { pcre2_match_data_free(data); }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

}  // namespace

std::string to_pcre2_pattern(std::string_view hf) {
  std::string out;
  out.reserve(hf.size() + 128);
  bool in_class = false;
  for (size_t i = 0; i < hf.size(); ++i) {
    const char c = hf[i];
    if (c == '\\' && i + 1 < hf.size()) {
      const char e = hf[i + 1];
      if (e == 's' || e == 'S') {
        if (in_class) fail("pre-tokenizer: pattern '{}' uses \\{} inside a character class", hf, e);
        out += e == 's' ? "[" : "[^";
        out += kJsWhiteSpaceClass;
        out += ']';
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal in both dialects.
      if (i + 1 < hf.size() && hf[i + 1] == '^') out += hf[++i];
      if (i + 1 < hf.size() && hf[i + 1] == ']') out += hf[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct PreTokenizer::Impl {
  pcre2_code* code[3] = {nullptr, nullptr, nullptr};
  bool jit[3] = {false, false, false};

  ~Impl() {
    for (pcre2_code* c : code)
      if (c) pcre2_code_free(c);
  }

  // Finds the next match of step `k` in `subject` at or after `from`; false when there is none.
  bool find(int k, std::string_view subject, size_t from, size_t& start, size_t& end, MatchScratch& ms) const {
    const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
    int rc = jit[k] ? pcre2_jit_match(code[k], s, subject.size(), from, 0, ms.data, nullptr) : PCRE2_ERROR_JIT_STACKLIMIT;
    // No JIT, or its stack is exhausted (no input we know of does that): use the interpreter, which
    // keeps its backtracking frames on the heap.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code[k], s, subject.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, ms.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) fail("pre-tokenizer: PCRE2 match failed on a {}-byte piece: {}", subject.size(), pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ms.data);
    start = ov[0];
    end = ov[1];
    return true;
  }

  // Applies step `k` (and then the later steps) to one piece.
  void run(int k, std::string_view piece, std::vector<std::string_view>& out, MatchScratch& ms) const {
    if (k == 3) {
      out.push_back(piece);
      return;
    }
    size_t pos = 0, start = 0, end = 0;
    while (pos < piece.size() && find(k, piece, pos, start, end, ms)) {
      if (end == start) {  // none of the patterns can match empty; guard against a silent loop anyway
        fail("pre-tokenizer: split pattern {} matched an empty string", k + 1);
      }
      if (start > pos) run(k + 1, piece.substr(pos, start - pos), out, ms);
      run(k + 1, piece.substr(start, end - start), out, ms);
      pos = end;
    }
    if (pos < piece.size()) run(k + 1, piece.substr(pos), out, ms);
  }
};

PreTokenizer::PreTokenizer() : impl_(std::make_unique<Impl>()) {
  for (int k = 0; k < 3; ++k) {
    const std::string pattern = to_pcre2_pattern(kSplitPatterns[k]);
    int err = 0;
    PCRE2_SIZE offset = 0;
    impl_->code[k] = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
    if (!impl_->code[k]) {
      fail("pre-tokenizer: PCRE2 rejected split pattern {} at offset {}: {}", k + 1, offset, pcre2_message(err));
    }
    impl_->jit[k] = pcre2_jit_compile(impl_->code[k], PCRE2_JIT_COMPLETE) == 0;
  }
}

PreTokenizer::~PreTokenizer() = default;

bool PreTokenizer::jit_enabled() const { return impl_->jit[0] && impl_->jit[1] && impl_->jit[2]; }

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  MatchScratch ms;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t good = utf8_valid_until(text, pos);
    if (good > pos) impl_->run(0, text.substr(pos, good - pos), out, ms);
    if (good == text.size()) break;
    const size_t bad = utf8_scan(text, good).length;
    for (size_t i = 0; i < bad; ++i) out.push_back(text.substr(good + i, 1));
    pos = good + bad;
  }
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> out;
  split(text, out);
  return out;
}

}  // namespace ds4::tok
