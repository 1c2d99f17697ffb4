// Byte and time quantities as users write them: "2GiB", "1500MiB", "60%",
// and the memory budget (docs/budgets.md: what a percentage is of).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mutwo {

// The most bytes mutwo takes from a user or a file: 1 PiB, more than any
// device holds and far from overflow when sums of sizes are formed.
inline constexpr int64_t kMaxBytes = int64_t{1} << 50;

// "1.5 GiB" style, binary units.
std::string format_bytes(int64_t bytes);

// Parses "123", "64KiB", "1500MiB", "2GiB", "1.5GB" (GB = GiB, as users mean it).
// Throws UserError naming the accepted forms.
int64_t parse_bytes(std::string_view text);

// A memory budget as users write it, parsed once (before any work):
// - bytes ("2GiB", "1500MiB", "1048576"): a bound on the step's peak;
// - a fraction ("60%") of the activation memory the plan can free: with A the
//   activation bytes live at the unplanned peak and F the rest of that peak
//   (parameters, gradients, optimizer state, inputs, workspaces: what planning
//   cannot change), the budget is F + f * A (budget_of_fraction): 100% is the
//   unplanned peak; a percentage is in (0%, 100%] (0% would hold no activation:
//   lowest is the floor, above 100% nothing is planned);
// - lowest: the lowest peak the planner reaches, never refused;
// - none: no budget (the step as it is; a command's default).
struct Budget {
  enum class Kind : uint8_t { none, bytes, fraction, lowest };
  Kind kind = Kind::none;
  int64_t bytes = 0;    // Kind::bytes
  double fraction = 0;  // Kind::fraction: 0.6 for "60%"
  static Budget of_bytes(int64_t b) { return {Kind::bytes, b, 0}; }
  static Budget of_fraction(double f) { return {Kind::fraction, 0, f}; }
  static Budget lowest() { return {Kind::lowest, 0, 0}; }
  bool operator==(const Budget& o) const { return kind == o.kind && bytes == o.bytes && fraction == o.fraction; }
};
// Parses "2GiB", "60%", "lowest". Throws UserError saying what to write: a
// bare number below 1 MiB ("60", "0.6") is refused ("write 60% or 60MiB"),
// as are sizes that are not sizes ("abc", "-5GiB") and an empty text.
Budget parse_budget(std::string_view text);
// How a budget reads: "2.0 GiB", "60%", "lowest", "no budget".
std::string budget_text(const Budget& b);
// The bytes a fraction stands for: fixed + f * activation (see Budget).
int64_t budget_of_fraction(double f, int64_t fixed, int64_t activation);
// The inverse: what fraction of the activation memory `bytes` is (negative
// below `fixed`); `activation` must be positive.
double fraction_of_budget(int64_t bytes, int64_t fixed, int64_t activation);
// A size text that parse_bytes reads as at least `bytes`: "122.9MiB" (rounded
// up in the last place shown), for messages that say what to ask for.
std::string bytes_at_least(int64_t bytes);

// The least whole percentage whose budget (budget_of_fraction) holds `bytes`:
// "83%"; `activation` must be positive. What a refusal asks for instead.
std::string percent_at_least(int64_t bytes, int64_t fixed, int64_t activation);
// Two sizes as format_bytes writes them, in the largest unit that keeps them
// apart ("300.2 KiB", "310.0 KiB" where MiB would give 0.3 MiB twice).
std::pair<std::string, std::string> format_bytes_apart(int64_t a, int64_t b);

// Parses a comma-separated list of positive integers, e.g. "8,16,32".
std::vector<int64_t> parse_int_list(std::string_view text);

}  // namespace mutwo
