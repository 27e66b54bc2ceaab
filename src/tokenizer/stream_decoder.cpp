#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace ds4::tok {

std::string StreamDecoder::push(int32_t id) {
  pending_ += tokenizer_.token_piece(id);  // throws before touching the buffer on a bad id
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const size_t good = utf8_valid_until(pending_, pos);
    out.append(pending_, pos, good - pos);
    pos = good;
    if (pos == pending_.size()) break;
    const Utf8Scan s = utf8_scan(pending_, pos);
    if (s.kind == Utf8Scan::Kind::kTruncated) break;  // wait for the rest of the character
    out += "\xEF\xBF\xBD";
    pos += s.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
  pending_.clear();
  return out;
}

}  // namespace ds4::tok
