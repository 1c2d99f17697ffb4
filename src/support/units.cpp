// Byte quantities: formatting and parsing as users write them.
#include "support/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "support/error.h"

namespace mutwo {

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.1f} {}", v, units[u]);
}

int64_t parse_bytes(std::string_view text) {
  std::string s(text);
  const char* hint = "write a size such as 4096, 512KiB, 1500MiB or 2GiB";
  MUTWO_CHECK(!s.empty(), "empty size; {}", hint);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  MUTWO_CHECK(end != s.c_str() && v >= 0 && std::isfinite(v), "'{}' is not a size; {}", s, hint);
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  MUTWO_CHECK(scale > 0, "unknown unit '{}' in '{}'; {}", unit, s, hint);
  MUTWO_CHECK(v * scale <= static_cast<double>(kMaxBytes), "'{}' is more than 1 PiB; {}", s, hint);
  return static_cast<int64_t>(std::llround(v * scale));
}

std::vector<int64_t> parse_int_list(std::string_view text) {
  std::vector<int64_t> out;
  std::string s(text);
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    MUTWO_CHECK(!item.empty() && *end == '\0' && v > 0, "'{}' in '{}' is not a positive integer; write a list such as 8,16,32", item, s);
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

int64_t parse_budget(const std::string& text, int64_t reference) {
  MUTWO_CHECK(!text.empty(), "--budget is required (e.g. 2GiB, 1500MiB or 60%)");
  if (text.back() == '%') {
    char* end = nullptr;
    double pct = std::strtod(text.c_str(), &end);
    MUTWO_CHECK(end == text.c_str() + text.size() - 1 && pct > 0 && pct <= 1000,
                "--budget {}: write a percentage such as 60%", text);
    return static_cast<int64_t>(static_cast<double>(reference) * pct / 100.0);
  }
  return parse_bytes(text);
}

}  // namespace mutwo
