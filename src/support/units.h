// Byte and time quantities as users write them: "2GiB", "1500MiB", "60%".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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

// A memory budget: "2GiB", "1500MiB" (parse_bytes) or "60%" of `reference`.
int64_t parse_budget(const std::string& text, int64_t reference);

// Parses a comma-separated list of positive integers, e.g. "8,16,32".
std::vector<int64_t> parse_int_list(std::string_view text);

}  // namespace mutwo
