// Progress of long work on stderr (max-batch, sweep, the optimal planner):
// what is being tried, how far, and an estimate of what is left. On a
// terminal it is one line redrawn in place; otherwise one line per step.
// Silent when disabled (--quiet). It never writes to stdout, so it cannot mix
// with --json. No library: the whole need is a carriage return and a clock,
// and the build's dependencies stay as they are (fmt only).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

namespace mutwo {

struct ProgressOptions {
  bool enabled = true;  // false: prints nothing (--quiet)
  int live = -1;        // 1: one line redrawn in place; 0: one line per step; -1: live when `out` is a terminal
  std::FILE* out = stderr;
};

class Progress {
 public:
  // `task` starts every line ("max-batch").
  explicit Progress(std::string task, ProgressOptions o = {});
  ~Progress();  // ends a live line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // More work expected, in the units step() counts (steps, or a cost such as
  // the batch size); the estimate of what is left needs it.
  void expect(double units) { total_ += units; }
  // Starts a piece of work of `units` (the previous one is then done):
  // "max-batch: [40%] mutwo: batch 121 (12 s, about 30 s left)". Without
  // expected work, or for a step of 0 units, the share done and the estimate
  // are left out.
  void step(std::string_view what, double units = 1);
  // A line that stays (a finding): a live line is cleared first and drawn
  // again after it. warn() prints it even when disabled (a warning, not progress).
  void note(std::string_view line);
  void warn(std::string_view line);
  // Ends a live line (the last step stays on screen); nothing otherwise.
  void done();

  bool enabled() const { return o_.enabled; }
  bool live() const { return o_.live == 1; }
  double elapsed_s() const;
  // The estimate step() prints: seconds left, from the time per unit so far;
  // negative when unknown (no unit done yet, or nothing expected).
  double left_s() const;

 private:
  void draw(const std::string& line);

  std::string task_;
  ProgressOptions o_;
  std::chrono::steady_clock::time_point t0_, step_t0_;
  double total_ = 0, done_ = 0, current_ = 0;  // units expected, finished, and of the step under way
  int steps_ = 0;
  std::string last_;  // the live line on screen ("" if none)
};

}  // namespace mutwo
