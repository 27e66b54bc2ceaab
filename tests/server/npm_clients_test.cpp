// The real ds4-server driven by the official npm clients openai@6.49.0 and @anthropic-ai/sdk@1.14.0
// (npm_clients.mjs). Skips, saying why, when the fixture could not reach the npm registry.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "server_process.h"

namespace ds4::server {
namespace {

TEST(NpmClients, OpenAIAndAnthropicSdks) {
  const std::filesystem::path prefix = DS4_NPM_PREFIX;
  if (std::filesystem::exists(prefix / "REGISTRY_UNREACHABLE")) {
    std::ifstream f(prefix / "REGISTRY_UNREACHABLE");
    std::stringstream s;
    s << f.rdbuf();
    GTEST_SKIP() << s.str();
  }
  ASSERT_TRUE(std::filesystem::exists(prefix / "node_modules/openai/package.json"))
      << "run the server_npm_install fixture first (ctest -R server)";
  ASSERT_TRUE(std::string(DS4_NODE_EXECUTABLE).size() > 0) << "node not found at configure time";
  test::ServerProcess server({"-c", "512"});
  ASSERT_GT(server.port(), 0) << server.log();
  const std::string cmd = std::string(DS4_NODE_EXECUTABLE) + " " + DS4_NPM_SCRIPT + " http://127.0.0.1:" +
                          std::to_string(server.port()) + " " + prefix.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out << "\n--- server log ---\n" << server.log();
  EXPECT_NE(out.find("ALL OK"), std::string::npos) << out;
}

}  // namespace
}  // namespace ds4::server
