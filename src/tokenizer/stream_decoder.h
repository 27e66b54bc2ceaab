// Incremental detokenizer for streaming output: emits only complete UTF-8 characters.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace ds4::tok {

/// Turns token ids, given one at a time, into text that is always well-formed UTF-8.
///
/// Rule: the bytes of each token (Tokenizer::token_piece) are appended to a pending buffer, which is
/// then scanned from the front. A complete, well-formed character is emitted. An ill-formed sequence
/// is emitted as one U+FFFD per maximal subpart (Unicode §3.9) as soon as it is definitely invalid,
/// i.e. when a byte arrives that cannot continue it (or it cannot start a character at all). A
/// sequence that is well-formed so far but incomplete at the end of the buffer is held back until
/// more bytes arrive; finish() turns a held-back tail into one U+FFFD. Hence, for any ids, the
/// concatenation of all push() results and finish() equals utf8_sanitize(tokenizer.decode(ids)),
/// and equals tokenizer.decode(ids) whenever that is valid UTF-8.
///
/// Holds a reference to the tokenizer, which must outlive it. Not thread-safe (one per stream).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  /// Adds one token; returns the text that became complete (possibly empty). Throws ds4::Error when
  /// `id` is outside [0, n_vocab()) (the stream is left unchanged).
  std::string push(int32_t id);

  /// Ends the stream: returns U+FFFD when bytes were held back (else ""), and resets the decoder.
  std::string finish();

  /// Number of bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace ds4::tok
