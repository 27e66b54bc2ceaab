// Helpers shared by the chat tests.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ds4::chat::test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string golden_dir() { return std::string(DS4_SHARED_DIR) + "/testdata/encoding/"; }
inline std::string local_data_dir() { return std::string(DS4_SOURCE_DIR) + "/tests/chat/data/"; }

}  // namespace ds4::chat::test
