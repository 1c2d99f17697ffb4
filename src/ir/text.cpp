// Printer and parser for the IR's text form (see text.h for the grammar).
#include "ir/text.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "support/error.h"

namespace mutwo::ir {

namespace {

// A string attribute as "...", with \" and \\ escaped.
std::string quote(const std::string& v) {
  std::string s = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') s += '\\';
    s += c;
  }
  return s + '"';
}

std::string print_double(double d) {
  std::string s = fmt::format("{}", d);  // shortest form that reads back exactly
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

constexpr std::string_view kInitNames[] = {"none", "zeros", "ones", "uniform", "normal", "randint", "data"};
constexpr int kNumInits = 7;

std::string decl(const Graph& g, ValueId v) {
  const Value& val = g.value(v);
  std::string s = fmt::format("%{} : {} {}", val.name, to_string(val.type), to_string(val.role));
  const Init& in = val.init;
  switch (in.kind) {
    case Init::none: break;
    case Init::zeros:
    case Init::ones:
    case Init::data: s += fmt::format(" init={}", kInitNames[in.kind]); break;
    case Init::uniform:
    case Init::normal: s += fmt::format(" init={}({},{})", kInitNames[in.kind], print_double(in.a), print_double(in.b)); break;
    case Init::randint: s += fmt::format(" init=randint({})", print_double(in.b)); break;
  }
  return s;
}

std::string print_attr(const Attr& a) {
  if (auto* i = std::get_if<int64_t>(&a)) return fmt::format("{}", *i);
  if (auto* d = std::get_if<double>(&a)) return print_double(*d);
  if (auto* l = std::get_if<std::vector<int64_t>>(&a)) return fmt::format("[{}]", fmt::join(*l, ","));
  return quote(std::get<std::string>(a));
}

}  // namespace

std::string print_node(const Graph& g, const Node& n) {
  std::string out;
  if (n.outputs.empty()) out = "_";
  for (size_t i = 0; i < n.outputs.size(); ++i) out += (i ? ", " : "") + decl(g, n.outputs[i]);
  out += fmt::format(" = {}(", n.op);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (i) out += ", ";
    out += n.inputs[i] == kNoValue ? std::string("_") : "%" + g.value(n.inputs[i]).name;
  }
  out += ")";
  if (!n.attrs.items().empty()) {
    out += " {";
    bool first = true;
    for (const auto& [k, v] : n.attrs.items()) {
      out += fmt::format("{}{}={}", first ? "" : ", ", k, print_attr(v));
      first = false;
    }
    out += "}";
  }
  out += fmt::format(" {}", to_string(n.phase));
  if (!n.scope.empty()) out += " scope=" + n.scope;
  return out;
}

std::string print(const Graph& g) {
  std::vector<bool> produced(g.num_values(), false);
  for (const Node& n : g.nodes())
    for (ValueId v : n.outputs) produced[static_cast<size_t>(v)] = true;
  std::string out = fmt::format("graph {}\n", g.name);
  if (!g.data_file.empty()) out += fmt::format("data {}\n", quote(g.data_file));
  for (const Value& v : g.values())
    if (!produced[static_cast<size_t>(v.id)]) out += decl(g, v.id) + "\n";
  for (const Node& n : g.nodes()) out += print_node(g, n) + "\n";
  if (!g.outputs.empty()) {
    out += "outputs";
    for (size_t i = 0; i < g.outputs.size(); ++i) out += (i ? ", %" : " %") + g.value(g.outputs[i]).name;
    out += "\n";
  }
  return out;
}

std::string fingerprint(const Graph& g) {
  Graph copy = g;
  copy.data_file.clear();
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : print(copy)) h = (h ^ c) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

namespace {

// A cursor over one line, with errors that name the line and column.
class Lexer {
 public:
  Lexer(std::string_view line, int line_no) : s_(line), line_no_(line_no) {}

  [[noreturn]] void fail(std::string_view what) const {
    MUTWO_FAIL("line {}, column {}: {} (near '{}')", line_no_, pos_ + 1, what, s_.substr(pos_, 24));
  }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool at_end() {
    skip_ws();
    return pos_ >= s_.size();
  }
  bool peek(char c) {
    skip_ws();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool accept(char c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!accept(c)) fail(fmt::format("expected '{}'", c));
  }
  static bool word_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/';
  }
  std::string word() {
    skip_ws();
    size_t b = pos_;
    while (pos_ < s_.size() && word_char(s_[pos_])) ++pos_;
    if (b == pos_) fail("expected a word");
    return std::string(s_.substr(b, pos_ - b));
  }
  std::string name() {  // %name
    expect('%');
    size_t b = pos_;
    while (pos_ < s_.size() && word_char(s_[pos_])) ++pos_;
    if (b == pos_) fail("expected a value name after '%'");
    return std::string(s_.substr(b, pos_ - b));
  }
  int64_t integer() {
    skip_ws();
    const char* begin = s_.data() + pos_;
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(begin, &end, 10);
    if (end == begin) fail("expected an integer");
    if (errno == ERANGE) fail("integer out of range (beyond 64 bits)");
    pos_ += static_cast<size_t>(end - begin);
    return v;
  }
  Attr attr_value() {
    skip_ws();
    if (accept('[')) {
      std::vector<int64_t> l;
      if (!accept(']')) {
        do l.push_back(integer());
        while (accept(','));
        expect(']');
      }
      return l;
    }
    if (accept('"')) {
      std::string v;
      while (pos_ < s_.size() && s_[pos_] != '"') {
        if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) ++pos_;
        v += s_[pos_++];
      }
      if (pos_ >= s_.size()) fail("unterminated string");
      ++pos_;
      return v;
    }
    size_t b = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
                                s_[pos_] == '-' || s_[pos_] == '+'))
      ++pos_;
    std::string tok(s_.substr(b, pos_ - b));
    if (tok.empty()) fail("expected an attribute value");
    if (tok.find_first_of(".eEni") != std::string::npos) {
      char* end = nullptr;
      errno = 0;
      double d = std::strtod(tok.c_str(), &end);
      if (*end != '\0') fail("bad number");
      if (errno == ERANGE && std::isinf(d)) fail("number out of range (beyond a double's 1.8e308; inf is written inf)");
      return d;
    }
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(tok.c_str(), &end, 10);
    if (*end != '\0') fail("bad integer");
    if (errno == ERANGE) fail("integer out of range (beyond 64 bits)");
    return static_cast<int64_t>(v);
  }
  TensorType type() {
    std::string dt = word();
    auto d = parse_dtype(dt);
    if (!d) fail(fmt::format("unknown element type '{}' (f32, f64, f16, bf16, i64, i32, bool, u8)", dt));
    TensorType t;
    t.dtype = *d;
    expect('[');
    if (!accept(']')) {
      do t.shape.push_back(integer());
      while (accept(','));
      expect(']');
    }
    return t;
  }
  std::string_view rest() {
    skip_ws();
    return s_.substr(pos_);
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int line_no_;
};

struct Decl {
  std::string name;
  TensorType type;
  Role role;
  Init init;
};

Decl parse_decl(Lexer& lx) {
  Decl d;
  d.name = lx.name();
  lx.expect(':');
  d.type = lx.type();
  std::string r = lx.word();
  auto role = parse_role(r);
  if (!role) lx.fail(fmt::format("unknown role '{}'", r));
  d.role = *role;
  if (lx.peek('i')) {  // init=kind or init=kind(a,b)
    if (lx.word() != "init") lx.fail("expected init=... after the role");
    lx.expect('=');
    std::string kind = lx.word();
    int k = 0;
    while (k < kNumInits && kInitNames[k] != kind) ++k;
    if (k == 0 || k == kNumInits)
      lx.fail(fmt::format("unknown init '{}' (zeros, ones, uniform, normal, randint, data)", kind));
    d.init.kind = static_cast<Init::Kind>(k);
    auto number = [&] {
      Attr a = lx.attr_value();
      if (auto* i = std::get_if<int64_t>(&a)) return static_cast<double>(*i);
      if (auto* f = std::get_if<double>(&a)) return *f;
      lx.fail("expected a number");
    };
    if (d.init.kind == Init::uniform || d.init.kind == Init::normal) {
      lx.expect('(');
      d.init.a = number();
      lx.expect(',');
      d.init.b = number();
      lx.expect(')');
    } else if (d.init.kind == Init::randint) {
      lx.expect('(');
      d.init.b = number();
      lx.expect(')');
    }
  }
  return d;
}

}  // namespace

Graph parse(std::string_view text) {
  Graph g;
  std::istringstream in{std::string(text)};
  std::string line;
  int line_no = 0;
  bool seen_header = false;
  auto lookup = [&](Lexer& lx, const std::string& name) {
    ValueId v = g.find(name);
    if (v == kNoValue) lx.fail(fmt::format("%{} is used before it is defined", name));
    return v;
  };
  auto define = [&](Lexer& lx, const Decl& d) {
    if (g.find(d.name) != kNoValue) lx.fail(fmt::format("%{} is defined twice", d.name));
    return g.add_value(d.name, d.type, d.role, d.init);
  };
  while (std::getline(in, line)) {
    ++line_no;
    Lexer lx(line, line_no);
    if (lx.at_end() || lx.peek('#')) continue;
    if (!seen_header) {
      if (lx.peek('%') || lx.word() != "graph") lx.fail("a graph starts with a line 'graph NAME'");
      g.name = lx.word();
      if (!lx.at_end()) lx.fail("unexpected text after the graph's name");
      seen_header = true;
      continue;
    }
    if (lx.peek('d')) {  // data "file"
      if (lx.word() != "data") lx.fail("expected a value declaration, a node, 'data' or 'outputs'");
      Attr file = lx.attr_value();
      if (!std::holds_alternative<std::string>(file)) lx.fail("expected data \"FILE\"");
      g.data_file = std::get<std::string>(file);
      if (!lx.at_end()) lx.fail("unexpected text after data \"FILE\"");
      continue;
    }
    if (!lx.peek('%') && !lx.peek('_')) {
      std::string kw = lx.word();
      if (kw != "outputs") lx.fail("expected a value declaration, a node or 'outputs'");
      do g.outputs.push_back(lookup(lx, lx.name()));
      while (lx.accept(','));
      if (!lx.at_end()) lx.fail("unexpected text after outputs");
      continue;
    }
    std::vector<Decl> outs;
    if (!lx.accept('_')) {
      do outs.push_back(parse_decl(lx));
      while (lx.accept(','));
    }
    if (!lx.accept('=')) {  // a declaration of a graph input
      if (outs.size() != 1) lx.fail("expected '=' after the outputs of a node");
      if (!lx.at_end()) lx.fail("unexpected text after a declaration");
      define(lx, outs[0]);
      continue;
    }
    Node n;
    n.op = lx.word();
    lx.expect('(');
    if (!lx.accept(')')) {
      do {
        if (lx.accept('_')) n.inputs.push_back(kNoValue);
        else n.inputs.push_back(lookup(lx, lx.name()));
      } while (lx.accept(','));
      lx.expect(')');
    }
    if (lx.accept('{')) {
      if (!lx.accept('}')) {
        do {
          std::string key = lx.word();
          lx.expect('=');
          n.attrs.set(key, lx.attr_value());
        } while (lx.accept(','));
        lx.expect('}');
      }
    }
    std::string ph = lx.word();
    auto phase = parse_phase(ph);
    if (!phase) lx.fail(fmt::format("unknown phase '{}' (fwd, loss, bwd, optim, recompute)", ph));
    n.phase = *phase;
    if (!lx.at_end()) {
      if (lx.word() != "scope") lx.fail("expected scope=... or the end of the line");
      lx.expect('=');
      n.scope = lx.word();
      if (!lx.at_end()) lx.fail("unexpected text at the end of the node");
    }
    for (const Decl& d : outs) n.outputs.push_back(define(lx, d));
    g.append(std::move(n));
  }
  MUTWO_CHECK(seen_header, "empty graph text: it must start with 'graph NAME'");
  return g;
}

}  // namespace mutwo::ir
