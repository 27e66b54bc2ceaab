// libFuzzer target for the GGUF reader. Contract under test: for any byte string the reader
// either parses it or throws ds4::Error; it never reads outside the buffer (ASan), never hits
// undefined behaviour (UBSan), never lets another exception escape (bad_alloc from a bogus
// count would abort here) and every accessor of a parsed file stays inside the buffer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/error.h"
#include "gguf/reader.h"

namespace {

template <typename F>
void may_throw(F&& f) {
  try {
    f();
  } catch (const ds4::Error&) {
  }
}

void exercise(const ds4::gguf::ValueRef& v) {
  (void)v.to_value();
  (void)v.type_name();
  may_throw([&] { (void)v.as_u32(); });
  may_throw([&] { (void)v.as_u64(); });
  may_throw([&] { (void)v.as_f32(); });
  may_throw([&] { (void)v.as_bool(); });
  may_throw([&] { (void)v.as_string(); });
  may_throw([&] { (void)v.as_int_array(); });
  may_throw([&] { (void)v.as_f32_array(); });
  may_throw([&] { (void)v.as_string_array(); });
  may_throw([&] {
    for (const auto& item : v.array_items()) (void)item.type_name();
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto r = ds4::gguf::Reader::from_memory({data, size}, "fuzz.gguf");
    for (const auto& v : r.metadata()) exercise(v);
    volatile uint8_t sink = 0;
    for (const auto& t : r.tensors()) {
      if (t.file_offset > size || t.n_bytes > size - t.file_offset) std::abort();
      if (t.n_bytes > 0) sink = sink ^ t.data[0] ^ t.data[t.n_bytes - 1];  // ASan checks both ends
      if (r.find_tensor(t.name) == nullptr) std::abort();
    }
    (void)sink;
  } catch (const ds4::Error&) {
    // rejected input: fine
  }
  return 0;
}
