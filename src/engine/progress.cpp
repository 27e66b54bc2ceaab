#include "engine/progress.h"

#include <unistd.h>

#include <cstdio>

namespace ds4 {

ProgressBar::ProgressBar(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled && isatty(STDERR_FILENO)) {}

ProgressBar::~ProgressBar() {
  if (enabled_ && !finished_) std::fputc('\n', stderr);
}

void ProgressBar::update(uint64_t done) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100) && done < total_) return;
  last_ = now;
  draw(done);
}

void ProgressBar::finish() {
  if (!enabled_ || finished_) return;
  draw(total_);
  std::fputc('\n', stderr);
  finished_ = true;
}

void ProgressBar::draw(uint64_t done) {
  constexpr int kWidth = 30;
  const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(kWidth), ' ');
  for (int i = 0; i < filled && i < kWidth; ++i) bar[static_cast<size_t>(i)] = '=';
  if (filled < kWidth) bar[static_cast<size_t>(filled)] = '>';
  std::fprintf(stderr, "\r%s [%s] %3d%% %llu/%llu", label_.c_str(), bar.c_str(),
               static_cast<int>(frac * 100.0), static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total_));
  std::fflush(stderr);
}

}  // namespace ds4
