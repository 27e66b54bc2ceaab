// A minimal terminal progress bar for model load and prefill ("prefill [=====>    ] 512/2048").
// Draws to stderr only when it is a terminal; otherwise prints nothing (logs stay clean).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ds4 {

/// Progress bar over `total` units (bytes, tokens). update() redraws at most every 100 ms.
class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total, bool enabled = true);
  ~ProgressBar();
  void update(uint64_t done);  ///< sets the absolute progress
  void finish();               ///< draws 100% and ends the line

 private:
  void draw(uint64_t done);
  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace ds4
