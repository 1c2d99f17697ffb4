// The pickle writer (see pickle.h). Opcodes as CPython's Lib/pickle.py names them.
#include "report/pickle.h"

#include <cstdint>
#include <cstring>

#include "support/error.h"

namespace mutwo::report {

namespace {

constexpr char kProto = '\x80', kStop = '.', kMark = '(', kNone = 'N', kTrue = '\x88', kFalse = '\x89';
constexpr char kEmptyDict = '}', kEmptyList = ']', kSetItems = 'u', kAppends = 'e';
constexpr char kBinInt1 = 'K', kBinInt2 = 'M', kBinInt = 'J', kLong1 = '\x8a', kBinFloat = 'G', kBinUnicode = 'X';

// `n` bytes of `v`, least significant first.
void little_endian(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_int(std::string& out, int64_t v) {
  if (v >= 0 && v < 256) {
    out += kBinInt1;
    little_endian(out, static_cast<uint64_t>(v), 1);
  } else if (v >= 0 && v < 65536) {
    out += kBinInt2;
    little_endian(out, static_cast<uint64_t>(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out += kBinInt;
    little_endian(out, static_cast<uint64_t>(v), 4);
  } else {
    // LONG1: the fewest two's-complement bytes that hold v (5 to 8 here).
    int n = 5;
    while (n < 8 && !(v >= -(int64_t{1} << (8 * n - 1)) && v < (int64_t{1} << (8 * n - 1)))) ++n;
    out += kLong1;
    out += static_cast<char>(n);
    little_endian(out, static_cast<uint64_t>(v), n);
  }
}

void put_unsigned(std::string& out, uint64_t v) {
  if (v <= static_cast<uint64_t>(INT64_MAX)) return put_int(out, static_cast<int64_t>(v));
  out += kLong1;  // 2^63 and above: 9 bytes, the last 0 (positive)
  out += static_cast<char>(9);
  little_endian(out, v, 8);
  out += '\0';
}

void put_string(std::string& out, const std::string& s) {
  MUTWO_ASSERT(s.size() <= UINT32_MAX, "a string of {} bytes in a pickle", s.size());
  out += kBinUnicode;
  little_endian(out, s.size(), 4);
  out += s;
}

void put(std::string& out, const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: out += kNone; return;
    case nlohmann::json::value_t::boolean: out += v.get<bool>() ? kTrue : kFalse; return;
    case nlohmann::json::value_t::number_integer: put_int(out, v.get<int64_t>()); return;
    case nlohmann::json::value_t::number_unsigned: put_unsigned(out, v.get<uint64_t>()); return;
    case nlohmann::json::value_t::number_float: {
      const double d = v.get<double>();
      uint64_t bits = 0;
      std::memcpy(&bits, &d, sizeof bits);
      out += kBinFloat;
      for (int i = 7; i >= 0; --i) out += static_cast<char>((bits >> (8 * i)) & 0xff);  // big-endian
      return;
    }
    case nlohmann::json::value_t::string: put_string(out, v.get_ref<const std::string&>()); return;
    case nlohmann::json::value_t::array:
      out += kEmptyList;
      if (v.empty()) return;
      out += kMark;
      for (const auto& x : v) put(out, x);
      out += kAppends;
      return;
    case nlohmann::json::value_t::object:
      out += kEmptyDict;
      if (v.empty()) return;
      out += kMark;
      for (const auto& [key, x] : v.items()) {
        put_string(out, key);
        put(out, x);
      }
      out += kSetItems;
      return;
    default: MUTWO_ASSERT(false, "a pickle cannot hold this JSON value ({})", v.type_name());
  }
}

}  // namespace

std::string to_pickle(const nlohmann::json& value) {
  std::string out{kProto, '\x02'};
  put(out, value);
  out += kStop;
  return out;
}

}  // namespace mutwo::report
