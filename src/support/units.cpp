// Byte quantities: formatting and parsing as users write them.
#include "support/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <algorithm>

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

namespace {

// What to write instead of a bare number below 1 MiB: "60% or 60MiB".
std::string bare_number_hint(double v) {
  if (v <= 0) return "a percentage (60%), a size (2GiB) or lowest";
  if (v <= 1) return fmt::format("{:g}% or {:g}MiB", v * 100, v);
  if (v <= 1000) return fmt::format("{:g}% or {:g}MiB", v, v);
  return fmt::format("{:g}MiB, or {:g}B if bytes are meant", v, v);
}

}  // namespace

Budget parse_budget(std::string_view text) {
  const std::string s(text);
  constexpr const char* kForms = "a size (2GiB, 1500MiB), a percentage of the activation memory (60%) or lowest";
  MUTWO_CHECK(!s.empty(), "empty budget; write {}", kForms);
  std::string lower = s;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "lowest") return Budget::lowest();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const bool number = end != s.c_str() && !std::isspace(static_cast<unsigned char>(s[0])) && std::isfinite(v);
  MUTWO_CHECK(number && v >= 0, "'{}' is not a budget; write {}", s, kForms);
  if (s.back() == '%') {
    MUTWO_CHECK(end == s.c_str() + s.size() - 1 && v > 0 && v <= 100,
                "'{}' is not a percentage in (0%, 100%]: 100% is the unplanned peak, so above it nothing is "
                "planned, and 0% would leave no room for any activation; write one such as 60%, or lowest for the "
                "lowest peak the planner reaches", s);
    return Budget::of_fraction(v / 100.0);
  }
  // A bare number is bytes; below 1 MiB it is surely a percentage or MiB meant.
  MUTWO_CHECK(*end != '\0' || v >= 1024.0 * 1024,
              "'{}' is a bare number, which reads as bytes, and below 1 MiB; write {}", s, bare_number_hint(v));
  return Budget::of_bytes(parse_bytes(s));
}

std::string budget_text(const Budget& b) {
  switch (b.kind) {
    case Budget::Kind::bytes: return format_bytes(b.bytes);
    case Budget::Kind::fraction: return fmt::format("{:.12g}%", b.fraction * 100);
    case Budget::Kind::lowest: return "lowest";
    case Budget::Kind::none: break;
  }
  return "no budget";
}

int64_t budget_of_fraction(double f, int64_t fixed, int64_t activation) {
  return fixed + static_cast<int64_t>(f * static_cast<double>(activation));
}

double fraction_of_budget(int64_t bytes, int64_t fixed, int64_t activation) {
  MUTWO_ASSERT(activation > 0, "a fraction of {} activation bytes", activation);
  return static_cast<double>(bytes - fixed) / static_cast<double>(activation);
}

std::string percent_at_least(int64_t bytes, int64_t fixed, int64_t activation) {
  auto at = static_cast<int64_t>(std::max(1.0, std::ceil(100 * fraction_of_budget(bytes, fixed, activation))));
  while (budget_of_fraction(static_cast<double>(at) / 100, fixed, activation) < bytes) ++at;
  return fmt::format("{}%", at);
}

std::pair<std::string, std::string> format_bytes_apart(int64_t a, int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  const int64_t most = std::max(std::llabs(a), std::llabs(b));
  int u = 0;
  while (u < 4 && static_cast<double>(most) >= std::pow(1024.0, u + 1)) ++u;
  for (;; --u) {
    if (u == 0) return {fmt::format("{} B", a), fmt::format("{} B", b)};
    const double scale = std::pow(1024.0, u);
    std::string x = fmt::format("{:.1f} {}", static_cast<double>(a) / scale, units[u]);
    std::string y = fmt::format("{:.1f} {}", static_cast<double>(b) / scale, units[u]);
    if (x != y || a == b) return {x, y};
  }
}

std::string bytes_at_least(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double scale = 1;
  while (static_cast<double>(bytes) >= 1024.0 * scale && u < 4) {
    scale *= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{}B", bytes);
  for (double tenths = std::ceil(static_cast<double>(bytes) / scale * 10);; ++tenths) {
    const std::string text = fmt::format("{:.1f}{}", tenths / 10, units[u]);
    if (parse_bytes(text) >= bytes) return text;
  }
}

}  // namespace mutwo
