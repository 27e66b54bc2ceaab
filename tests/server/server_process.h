// Test helper: runs the real ds4-server binary on a free loopback port and stops it.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ds4::server::test {

class ServerProcess {
 public:
  /// Starts `DS4_SERVER_BIN -m DS4_TINY_MODEL --port 0 ARGS` and waits (up to 120 s) for its
  /// "listening on http://127.0.0.1:PORT" line. port() is 0 when it did not come up.
  explicit ServerProcess(const std::vector<std::string>& args) {
    log_ = "/tmp/ds4_server_test_" + std::to_string(getpid()) + "_" + std::to_string(counter()++) + ".log";
    std::vector<std::string> argv = {DS4_SERVER_BIN, "-m", DS4_TINY_MODEL, "--port", "0", "-t", "1"};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      dup2(fd, 1);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    const std::regex re("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, re)) {
        port_ = std::stoi(m[1]);
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    unlink(log_.c_str());
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  /// Resident memory of the process in KiB (VmRSS of /proc/PID/status), or -1.
  long rss_kib() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
  }
  /// SIGKILL without any chance to clean up; waits for the exit.
  void kill9() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  /// The exit status when the process ended before it listened, else -1.
  int exit_code() const { return exit_code_; }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  /// Sends `sig` and waits up to `timeout_s` for the exit; returns the exit status (or -1).
  int signal_and_wait(int sig, int timeout_s) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_code_ = -1;
  std::string log_;
};

}  // namespace ds4::server::test
