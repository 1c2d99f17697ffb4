// Bad input files are the user's errors, never crashes: a JSON number no double
// holds, NaN or Infinity in a profile, step file or any JSON mutwo reads, and
// a node without an attribute its op needs, or with one of another type, are
// UserErrors naming the field or the node, never an internal error. ATen-free.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "ir/text.h"
#include "models/model.h"
#include "ops/op.h"
#include "profile/profile.h"
#include "stepfile/step_file.h"
#include "support/error.h"
#include "support/files.h"
#include "support/json_input.h"
#include "support/units.h"

namespace mutwo {
namespace {

// The UserError's message of `f`; a failure where it throws nothing or something else.
template <class F>
std::string user_error(F f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a UserError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "accepted";
  return "";
}

void expect_has(const std::string& msg, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

std::string parse_error(const std::string& text) {
  return user_error([&] { parse_json_input(text, "F"); });
}

TEST(Inputs, JsonNumbersNoDoubleHoldsAreRefusedNamingTheField) {
  expect_has(parse_error(R"({"a": {"b": [1, 2, 1e400]}})"), {"F: field 'a.b[2]' is 1e400", "beyond the range"});
  expect_has(parse_error(R"({"a": [{"x": 1}, {"y": -1e400}]})"), {"field 'a[1].y' is -1e400"});
  expect_has(parse_error("[" + std::string(400, '9') + "]"), {"field '[0]' is 9999", "..."});  // cut short
  expect_has(parse_error("1e400"), {"the top-level value is 1e400"});
  // Below the smallest double is zero, not an error.
  EXPECT_EQ(parse_json_input(R"({"a": 1e-400})", "F")["a"].get<double>(), 0.0);
}

// A budget is read in one language (docs/budgets.md): sizes, percentages of
// the activation memory, lowest; a bare number below 1 MiB and anything that
// is not a size are refused saying what to write.
TEST(Inputs, BudgetsAreReadAsUsersWriteThem) {
  // One case table for the C++ and the Python parser (tests/python/test_budget.py reads it too).
  const auto table = parse_json_input(read_file(std::string(MUTWO_TEST_DATA) + "/budgets.json"), "budgets.json");
  for (const auto& c : table["cases"]) {
    const std::string text = c["text"].get<std::string>();
    if (c.contains("error")) {
      std::vector<std::string> needles = c["error"].get<std::vector<std::string>>();
      expect_has(user_error([&] { parse_budget(text); }), needles);
      continue;
    }
    const std::string kind = c["kind"].get<std::string>();
    const Budget want = kind == "lowest" ? Budget::lowest()
                        : kind == "bytes" ? Budget::of_bytes(c["bytes"].get<int64_t>())
                                          : Budget::of_fraction(c["fraction"].get<double>());
    EXPECT_EQ(parse_budget(text), want) << "'" << text << "'";
  }
  // F + f * A, and back.
  EXPECT_EQ(budget_of_fraction(0.6, 1000, 3000), 2800);
  EXPECT_EQ(budget_of_fraction(1.0, 1000, 3000), 4000);
  EXPECT_DOUBLE_EQ(fraction_of_budget(2800, 1000, 3000), 0.6);
  EXPECT_EQ(budget_text(parse_budget("60%")), "60%");
  // What a message asks for reads back as at least the bytes it stands for.
  for (int64_t b : {int64_t{1}, int64_t{1023}, int64_t{1025}, int64_t{128763904}, int64_t{1} << 30, (int64_t{3} << 30) + 1})
    EXPECT_GE(parse_bytes(bytes_at_least(b)), b) << bytes_at_least(b);
  EXPECT_EQ(bytes_at_least(128763904), "122.8MiB");
  // The least percentage that holds a floor, and sizes kept apart.
  EXPECT_EQ(percent_at_least(2800, 1000, 3000), "60%");
  EXPECT_EQ(percent_at_least(2801, 1000, 3000), "61%");
  EXPECT_EQ(format_bytes_apart(307404, 317440), (std::pair<std::string, std::string>{"300.2 KiB", "310.0 KiB"}));
  EXPECT_EQ(format_bytes_apart(3 << 20, 5 << 20).first, "3.0 MiB");
}

TEST(Inputs, JsonNaNAndInfinityAreRefusedNamingTheField) {
  expect_has(parse_error(R"({"a": NaN})"), {"F: field 'a' is NaN", "no number for"});
  expect_has(parse_error(R"({"a": [1, Infinity]})"), {"field 'a[1]' is Infinity"});
  expect_has(parse_error(R"({"a": {"b": -Infinity}})"), {"field 'a.b' is -Infinity"});
  expect_has(parse_error(R"({"a": [1, 2)"), {"F: not valid JSON (error at byte", "in field 'a[2]'", "truncated"});
  expect_has(parse_error(std::string(100, '[')), {"nested deeper than 64 levels"});
}

// A profile of the mlp's step, as JSON text, for the reader's tests.
std::string mlp_profile_text() {
  models::ModelOptions o;
  o.name = "mlp";
  o.batch = 2;
  models::Model m = models::build_model(o);
  return profile::to_json_text(profile::describe(autodiff::build_training_step(std::move(m.graph), m.loss, {})));
}

// `text` with the first number of `key` made `token`.
std::string with_number(const std::string& text, const std::string& key, const std::string& token) {
  const std::regex number("\"" + key + "\": -?[0-9][0-9.eE+-]*");
  EXPECT_TRUE(std::regex_search(text, number)) << key;
  return std::regex_replace(text, number, "\"" + key + "\": " + token, std::regex_constants::format_first_only);
}

TEST(Inputs, ProfileNumbersOutOfRangeNameTheFieldAndMinusZeroIsZero) {
  const std::string text = mlp_profile_text();
  auto error = [&](const std::string& bad) { return user_error([&] { profile::from_json_text(bad, "p.json"); }); };
  expect_has(error(with_number(text, "step_ms", "1e400")), {"p.json: field 'step_ms' is 1e400"});
  expect_has(error(with_number(text, "step_ms", "-1e400")), {"field 'step_ms' is -1e400"});
  expect_has(error(with_number(text, "step_ms", "NaN")), {"field 'step_ms' is NaN"});
  expect_has(error(with_number(text, "ms", "Infinity")), {"field 'nodes[0].ms' is Infinity"});
  const profile::Profile p = profile::from_json_text(with_number(text, "step_ms", "-0.0"), "p.json");
  EXPECT_EQ(p.step_ms, 0.0);
  EXPECT_FALSE(std::signbit(p.step_ms)) << "-0.0 is read as 0";
  EXPECT_EQ(profile::from_json_text(with_number(text, "batch", "-0"), "p.json").batch, 0);
}

TEST(Inputs, StepFileNumberOutOfRangeNamesTheFileAndField) {
  const std::string path = ::testing::TempDir() + "inputs_step.json";
  write_file(path, R"({"format": "mutwo-step", "version": 1, "values": [{"shape": [2, 1e400]}]})");
  expect_has(user_error([&] { stepfile::load_step(path, {}); }), {path, "field 'values[0].shape[1]' is 1e400"});
}

// The tensors' bytes tile the tensor file's data section: a header length a
// byte short, ending in the header's padding, shifted every tensor by a byte
// (the in-process fuzzer found it accepted).
TEST(Inputs, TensorFileBytesTileItsDataSection) {
  const std::string path = ::testing::TempDir() + "inputs_tiles.safetensors";
  auto write = [&](const std::string& a, const std::string& b, size_t data_bytes) {
    const std::string header = R"({"__metadata__":{"format":"mutwo-step-data","version":"1"},)"
                               R"("a":{"dtype":"F32","shape":[2],"data_offsets":)" + a + "},"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":)" + b + "}}";
    std::string length(8, '\0');
    for (size_t i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    write_file(path, length + header + std::string(data_bytes, '\0'));
  };
  auto refusal = [&] { return user_error([&] { stepfile::read_tensor_index(path); }); };
  write("[0,8]", "[8,16]", 16);
  EXPECT_EQ(stepfile::read_tensor_index(path).size(), 2u);
  write("[0,8]", "[8,16]", 17);
  expect_has(refusal(), {path, "1 bytes after its last tensor's, in a data section of 17"});
  write("[0,8]", "[12,20]", 20);
  expect_has(refusal(), {path, "its tensors' bytes leave a gap at byte 8"});
  write("[0,8]", "[4,12]", 12);
  expect_has(refusal(), {path, "its tensors' bytes overlap at byte 4"});
}

// ---- attributes

// The verifier's message for the mlp's IR text with `from` replaced by `to`.
std::string ir_error(const std::string& from, const std::string& to) {
  models::ModelOptions o;
  o.name = "mlp";
  o.batch = 2;
  models::Model m = models::build_model(o);
  std::string text = ir::print(autodiff::build_training_step(std::move(m.graph), m.loss, {}));
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at == std::string::npos) return "";
  text.replace(at, from.size(), to);
  return user_error([&] { ops::verify(ir::parse(text)); });
}

TEST(Inputs, AMissingOrMistypedAttributeNamesTheNodeOpAndAttribute) {
  expect_has(ir_error("log_softmax(%head.out) {dim=1}", "log_softmax(%head.out)"),
             {"verifier: node", "log_softmax(%head.out)", "op log_softmax needs the attribute 'dim' (an integer)"});
  expect_has(ir_error("{dim=1}", "{dim=\"x\"}"), {"op log_softmax: attribute 'dim' must be an integer, got a string"});
  expect_has(ir_error("{dim=1}", "{dim=1.5}"), {"'dim' must be an integer, got a floating-point number"});
  expect_has(ir_error("{p=0.1}", "{p=[1]}"), {"attribute 'p' must be a number, got a list"});
  expect_has(ir_error("{p=0.1}", "{p=1}"), {"dropout: p must be in [0, 1)"});  // an integer is a number
}

TEST(Inputs, IrTextNumbersOutOfRangeAreRefused) {
  expect_has(ir_error("{dim=1}", "{dim=99999999999999999999}"), {"integer out of range"});
  expect_has(ir_error("{p=0.1}", "{p=1e400}"), {"number out of range"});
}

// Graphs that hold every family of op the zoo builds: each node of them,
// without one of its attributes or with it of another type, is accepted or
// refused as the user's error by ops::check and its FLOPs, never an internal
// error: every attribute a reader takes is declared in the op's row.
std::vector<ir::Graph> zoo_steps() {
  std::vector<ir::Graph> out;
  for (const char* name : {"mlp", "resnet-18", "bert-tiny", "transformer-lm"}) {
    models::ModelOptions o;
    o.name = name;
    o.batch = 2;
    if (std::string(name) == "resnet-18") o.image_size = 32;
    if (std::string(name) == "bert-tiny") o.seq = 8;
    models::Model m = models::build_model(o);
    autodiff::OptimizerConfig adam;
    adam.kind = autodiff::Optimizer::adam;
    out.push_back(autodiff::build_training_step(std::move(m.graph), m.loss,
                                                std::string(name) == "mlp" ? autodiff::OptimizerConfig{} : adam));
  }
  return out;
}

ir::Node without(const ir::Node& n, std::string_view key) {
  ir::Node out = n;
  out.attrs = {};
  for (const auto& [k, v] : n.attrs.items())
    if (k != key) out.attrs.set(k, v);
  return out;
}

void expect_user_error_or_none(const ir::Graph& g, const ir::Node& n, const std::string& what) {
  try {
    ops::check(g, n);
    ops::flops(g, n);
    ops::workspace_bytes(g, n);
  } catch (const UserError&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << n.op << " " << what << ": not a UserError: " << e.what();
  }
}

TEST(Inputs, EveryAttributeAReaderTakesIsDeclared) {
  size_t tried = 0;
  for (const ir::Graph& g : zoo_steps()) {
    for (const ir::Node& n : g.nodes()) {
      for (const auto& [key, value] : n.attrs.items()) {
        expect_user_error_or_none(g, without(n, key), "without " + key);
        for (const ir::Attr& other : {ir::Attr{int64_t{7}}, ir::Attr{0.5}, ir::Attr{std::vector<int64_t>{1}},
                                      ir::Attr{std::string("x")}}) {
          if (other.index() == value.index()) continue;
          ir::Node retyped = n;
          retyped.attrs.set(key, other);
          expect_user_error_or_none(g, retyped, "with " + key + " of another type");
          ++tried;
        }
      }
      // Each required attribute is refused missing, naming it.
      for (const ops::AttrSpec& s : ops::op(n.op).attrs) {
        if (!s.required) continue;
        expect_has(user_error([&] { ops::check(g, without(n, s.name)); }),
                   {"needs the attribute '" + std::string(s.name) + "'"});
      }
    }
  }
  EXPECT_GT(tried, 100u);
}

}  // namespace
}  // namespace mutwo
