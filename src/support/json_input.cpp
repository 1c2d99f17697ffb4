// parse_json_input: nlohmann's parser with a callback that bounds the nesting
// and follows where it is ("nodes[3].ms"), so that each way a document can fail
// to parse (bad syntax, NaN or Infinity, a number no double holds) is one
// UserError line naming the file and the field.
#include "support/json_input.h"

#include <array>
#include <string_view>
#include <vector>

namespace mutwo {

namespace {

using nlohmann::json;

// The path of the field being parsed, from the parser's callback events: one
// frame per open object (the key last read) or array (the elements begun).
class JsonPath {
 public:
  void on(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        begin_element();
        frames_.push_back({event == json::parse_event_t::array_start, {}, 0});
        break;
      case json::parse_event_t::key:
        if (!frames_.empty() && parsed.is_string()) frames_.back().key = printable(parsed.get_ref<const std::string&>());
        break;
      case json::parse_event_t::value:
        begin_element();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames_.empty()) frames_.pop_back();
        break;
    }
  }

  // "field 'nodes[3].ms'": the field whose value the parser was reading when
  // it stopped (in an array, the element after the last one begun).
  std::string field() const {
    std::string path;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (f.array) {
        path += fmt::format("[{}]", i + 1 < frames_.size() ? f.count - 1 : f.count);
      } else {
        if (f.key.empty() && i + 1 == frames_.size()) break;
        path += (path.empty() ? "" : ".") + f.key;
      }
    }
    return path.empty() ? std::string("the top-level value") : fmt::format("field '{}'", path);
  }

 private:
  struct Frame {
    bool array;
    std::string key;
    size_t count;
  };
  void begin_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().count;
  }
  // A key as one short line of the message: control characters replaced, cut at 40 bytes.
  static std::string printable(const std::string& key) {
    std::string out = key.substr(0, 40);
    for (char& c : out)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return key.size() > 40 ? out + "..." : out;
  }
  std::vector<Frame> frames_;
};

// The literal at the parser's stop (it reads one or two bytes of it: "N",
// "-I") when it is one of the non-finite numbers other writers put in JSON.
std::string_view non_finite_literal(const std::string& text, size_t byte) {
  static constexpr std::array<std::string_view, 8> kLiterals{"-Infinity", "Infinity", "-NaN", "NaN",
                                                             "-inf",      "inf",      "-nan", "nan"};
  for (std::string_view lit : kLiterals)
    for (size_t back : {2, 1})
      if (byte >= back && std::string_view(text).substr(byte - back, lit.size()) == lit) return lit;
  return {};
}

// The number in nlohmann's "number overflow parsing '1e400'", cut to 24 bytes.
std::string overflowing_number(const std::string& what) {
  const auto b = what.find("parsing '");
  const auto e = what.rfind('\'');
  if (b == std::string::npos || e == std::string::npos || e <= b + 9) return "a number";
  const std::string n = what.substr(b + 9, e - b - 9);
  return n.size() > 24 ? n.substr(0, 24) + "..." : n;
}

}  // namespace

json parse_json_input(const std::string& text, const std::string& source) {
  JsonPath path;
  auto follow = [&](int depth, json::parse_event_t event, json& parsed) {
    MUTWO_CHECK(depth <= kMaxJsonDepth, "{}: JSON nested deeper than {} levels; not a file mutwo wrote", source,
                kMaxJsonDepth);
    path.on(event, parsed);
    return true;
  };
  try {
    return json::parse(text, follow);
  } catch (const json::parse_error& e) {
    if (std::string_view lit = non_finite_literal(text, e.byte); !lit.empty())
      MUTWO_FAIL("{}: {} is {}, which JSON has no number for; write a finite number (mutwo writes no other)", source,
                 path.field(), lit);
    MUTWO_FAIL("{}: not valid JSON (error at byte {}, in {}; is the file truncated?)", source, e.byte, path.field());
  } catch (const json::out_of_range& e) {  // 406: a number beyond a double's range
    MUTWO_FAIL("{}: {} is {}, beyond the range of a double (about 1.8e308); write a finite number", source,
               path.field(), overflowing_number(e.what()));
  } catch (const json::exception& e) {
    MUTWO_FAIL("{}: not valid JSON (in {}: {})", source, path.field(), e.what());
  }
}

}  // namespace mutwo
