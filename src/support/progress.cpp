// Progress lines on stderr (see progress.h).
#include "support/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

namespace mutwo {

namespace {

std::string seconds(double s) {
  if (s < 60) return fmt::format("{:.0f} s", s);
  if (s < 3600) return fmt::format("{:.0f} min {:02.0f} s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f} h {:02.0f} min", std::floor(s / 3600), std::fmod(s, 3600) / 60);
}

}  // namespace

Progress::Progress(std::string task, ProgressOptions o)
    : task_(std::move(task)), o_(o), t0_(std::chrono::steady_clock::now()), step_t0_(t0_) {
  if (o_.live < 0) o_.live = o_.out && isatty(fileno(o_.out)) ? 1 : 0;
}

Progress::~Progress() { done(); }

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

double Progress::left_s() const {
  if (total_ <= 0 || done_ <= 0) return -1;
  const double per_unit = std::chrono::duration<double>(step_t0_ - t0_).count() / done_;
  const double in_step = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_t0_).count();
  return std::max(0.0, per_unit * std::max(0.0, total_ - done_) - in_step);
}

void Progress::step(std::string_view what, double units) {
  done_ += current_;
  current_ = units;
  step_t0_ = std::chrono::steady_clock::now();
  ++steps_;
  if (!o_.enabled) return;
  std::string line = fmt::format("{}: ", task_);
  // A step of no units (quick work between the counted ones) shows no share or estimate.
  if (total_ > 0 && units > 0) line += fmt::format("[{:.0f}%] ", std::min(99.0, 100 * done_ / total_));
  line += fmt::format("{} ({}", what, seconds(elapsed_s()));
  if (const double left = left_s(); left >= 0 && units > 0) line += fmt::format(", about {} left", seconds(left));
  draw(line + ")");
}

void Progress::note(std::string_view line) {
  if (o_.enabled) warn(line);
}

void Progress::warn(std::string_view line) {
  const std::string again = last_;
  if (live() && !last_.empty()) std::fputs("\r\033[K", o_.out);
  fmt::print(o_.out, "{}\n", line);
  last_.clear();
  if (live() && !again.empty()) draw(again);
  std::fflush(o_.out);
}

void Progress::done() {
  if (o_.enabled && live() && !last_.empty()) std::fputs("\n", o_.out);
  last_.clear();
  if (o_.out) std::fflush(o_.out);
}

void Progress::draw(const std::string& line) {
  if (live()) {
    fmt::print(o_.out, "\r\033[K{}", line);
    last_ = line;
  } else {
    fmt::print(o_.out, "{}\n", line);
  }
  std::fflush(o_.out);
}

}  // namespace mutwo
