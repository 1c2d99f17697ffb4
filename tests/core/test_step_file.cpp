// Steps from files on the ATen-free core: a zoo model's profile and report
// without ATen, the step-file loader's checks, a captured vocabulary head
// fused on load, and the loader's rewrites of a hand-written step file as a
// golden text.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "analysis/liveness.h"
#include "autodiff/autodiff.h"
#include "captured_head.h"
#include "ir/text.h"
#include "models/model.h"
#include "ops/op.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "report/report.h"
#include "stepfile/step_file.h"
#include "support/error.h"

namespace mutwo {
namespace {

using ir::Role;
using ir::TensorType;
using ir::ValueId;

// A zoo model's step, its Profile's JSON form and a report from it, and the
// step-file loader's checks: all without ATen.
TEST(StepFile, ZooModelProfileReportAndLoaderChecksWithoutATen) {
  models::ModelOptions o;
  o.name = "bert-tiny";
  o.batch = 2;
  o.seq = 16;
  models::Model m = models::build_model(o);
  ir::Graph g = autodiff::build_training_step(std::move(m.graph), m.loss, {});
  profile::Profile p = profile::describe(g);
  ASSERT_EQ(p.nodes.size(), g.nodes().size());
  EXPECT_EQ(p.persistent_bytes, analysis::analyze_liveness(g).persistent_bytes);
  profile::Profile back = profile::from_json_text(profile::to_json_text(p), "test");
  EXPECT_EQ(back.graph_text, p.graph_text);
  EXPECT_EQ(back.values.size(), p.values.size());
  plan::PlanInput in = plan::make_input(back);
  EXPECT_EQ(plan::simulate(in, {}).peak_bytes, analysis::analyze_liveness(g).peak_bytes);
  const std::string csv = ::testing::TempDir() + "core_nodes.csv";
  report::write_nodes_csv(p, csv);
  std::ifstream f(csv);
  EXPECT_EQ(std::count(std::istreambuf_iterator<char>(f), {}, '\n'), static_cast<long>(g.nodes().size()) + 1)
      << "a header and one line per node";
  EXPECT_TRUE(stepfile::is_step_file("step.json"));
  EXPECT_THROW(stepfile::load_step("/nonexistent/step.json", {}), UserError);
}

// The vocabulary head of a captured step (tests/common/captured_head.h: torch 1.13's
// form) fused on load into linear_cross_entropy: the nodes that made the
// logits, their log-softmax, the loss and their gradients are gone, the
// gradients keep their names; a near miss (the logits read by another node)
// and --no-fuse-loss leave the captured nodes.
TEST(StepFile, FusesTheVocabularyHead) {
  const std::string dir = ::testing::TempDir();
  auto ops_of = [](const ir::Graph& g) {
    std::vector<std::string> out;
    for (const ir::Node& n : g.nodes()) {
      std::string outs;
      for (ir::ValueId v : n.outputs) outs += (outs.empty() ? "" : ",") + g.value(v).name;
      out.push_back(fmt::format("{} {} {}", ir::to_string(n.phase), outs.empty() ? "_" : outs, ops::display_name(n)));
    }
    return out;
  };
  for (bool bias : {true, false}) {
    captured_head::Options o;
    o.bias = bias;
    o.ignore_rows = true;
    o.ignore_index = -1;
    ir::Graph g = stepfile::load_step(captured_head::write(dir, o), {});
    std::vector<std::string> golden = {
        "fwd view aten::view",
        "fwd view_3 aten::view",
        "fwd loss,loss.logsumexp linear_cross_entropy",
        bias ? "bwd mm_1,mm_2,d_b linear_cross_entropy_backward" : "bwd mm_1,mm_2 linear_cross_entropy_backward",
        "bwd t_3 aten::t",  // views of the fused node's d_weight: (d_weightᵀ)ᵀ, the captured gradient
        "bwd d_h aten::_reshape_alias",
        "bwd d_w aten::t",
        "optim _ sgd_step",
    };
    EXPECT_EQ(ops_of(g), golden) << fmt::format("{}", fmt::join(ops_of(g), "\n"));
    for (const ir::Node& n : g.nodes())
      if (n.op == "linear_cross_entropy") {
        EXPECT_EQ(n.attrs.i("ignore_index"), -1);
        EXPECT_EQ(n.inputs.size(), bias ? 4u : 3u);
      }
    EXPECT_EQ(g.value(g.find("d_w")).role, ir::Role::gradient);
    EXPECT_EQ(g.find("logp"), ir::kNoValue) << "values made by nobody are dropped";

    stepfile::LoadOptions off;
    off.fuse_loss = false;
    ir::Graph kept = stepfile::load_step(captured_head::write(dir, o), {}, off);
    EXPECT_EQ(kept.nodes().size(), bias ? 24u : 22u);
    o.logits_read_elsewhere = true;
    ir::Graph near = stepfile::load_step(captured_head::write(dir, o), {});
    EXPECT_EQ(ops_of(near).size(), kept.nodes().size() + 1) << fmt::format("{}", fmt::join(ops_of(near), "\n"));
    for (const ir::Node& n : near.nodes()) EXPECT_EQ(n.op.find("linear_cross_entropy"), std::string::npos);
  }
}

// A bf16 head whose logits are cast to f32 before the loss (captured_head.h's
// `upcast`) is fused with logits_dtype f32, both casts removed; a cast to f64
// (a near miss: linear_cross_entropy reduces bf16 logits in f32 only) is not.
TEST(StepFile, FusesAnUpcastVocabularyHead) {
  const std::string dir = ::testing::TempDir();
  captured_head::Options o;
  o.upcast = "f32";
  o.name = "upcast_head";
  ir::Graph g = stepfile::load_step(captured_head::write(dir, o), {});
  int fused = 0;
  for (const ir::Node& n : g.nodes()) {
    EXPECT_NE(n.op == "aten" ? n.attrs.s("target") : "", "aten::_to_copy") << "the casts are part of the fused pair";
    if (n.op != "linear_cross_entropy" && n.op != "linear_cross_entropy_backward") continue;
    ++fused;
    EXPECT_EQ(n.attrs.s("logits_dtype"), "f32");
    EXPECT_EQ(g.type(n.inputs[0]).dtype, ir::DType::bf16);
  }
  EXPECT_EQ(fused, 2);
  EXPECT_EQ(g.type(g.find("loss")).dtype, ir::DType::f32);
  EXPECT_EQ(g.type(g.find("d_w")).dtype, ir::DType::bf16);
  o.upcast = "f64";
  ir::Graph near = stepfile::load_step(captured_head::write(dir, o), {});
  for (const ir::Node& n : near.nodes()) EXPECT_EQ(n.op.find("linear_cross_entropy"), std::string::npos);
}

// A hand-written step file (docs/step-file.md) and its tensor file: the
// loader's rewrites as a golden text. y = dropout(relu(x @ w)); loss = sum(y).
// The joint graph makes a view of the saved relu in the forward part (a detach,
// as torch 1.13 does): on load it waits for its reader in the backward part.
// native_dropout keeps its mask and recomputes its output.
TEST(StepFile, LoadGolden) {
  const std::string dir = ::testing::TempDir();
  {
    std::string header =
        R"({"__metadata__":{"format":"mutwo-step-data","version":"1"},)"
        R"("w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},"input0":{"dtype":"F32","shape":[2,4],"data_offsets":[64,96]}})";
    std::ofstream f(dir + "golden.safetensors", std::ios::binary);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
    f << header << std::string(96, '\0');
  }
  auto value = [](const char* name, const char* role, const char* shape, const char* extra = "") {
    return fmt::format(R"({{"name":"{}","role":"{}","dtype":"f32","shape":{},"strides":[]{}}})", name, role, shape, extra);
  };
  auto node = [](const char* target, const char* args, const char* outs, const char* tags = "[]",
                 const char* alias = "null") {
    return fmt::format(R"({{"target":"{}","overload":"default","args":{},"outputs":{},"tags":{},"mutates":[],"alias_of":{},"scope":"","phase":"forward"}})",
                       target, args, outs, tags, alias);
  };
  const std::string doc = fmt::format(
      R"({{"format":"mutwo-step","version":1,"name":"golden","data":"golden.safetensors","loss":"loss","values":[{}],"nodes":[{}]}})",
      fmt::join(std::vector<std::string>{
                    value("p", "parameter", "[4,4]", R"(,"qualname":"w")"), value("x", "input", "[2,4]", R"(,"index":0)"),
                    value("t", "tangent", "[]"), value("mm", "intermediate", "[2,4]"), value("relu", "intermediate", "[2,4]"),
                    value("saved", "intermediate", "[2,4]"), value("y", "intermediate", "[2,4]"),
                    R"({"name":"mask","role":"intermediate","dtype":"bool","shape":[2,4],"strides":[]})",
                    value("loss", "intermediate", "[]"), value("gy", "intermediate", "[2,4]"), value("gr", "intermediate", "[2,4]"),
                    value("gm", "intermediate", "[2,4]"), value("gw", "gradient", "[4,4]", R"(,"of":"p")")},
                ","),
      fmt::join(std::vector<std::string>{
                    node("aten::mm", R"([{"t":"x"},{"t":"p"}])", R"(["mm"])"),
                    node("aten::relu", R"([{"t":"mm"}])", R"(["relu"])"),
                    node("aten::detach", R"([{"t":"relu"}])", R"(["saved"])", R"(["view"])", "0"),
                    node("aten::native_dropout", R"([{"t":"relu"},{"f":0.5},true])", R"(["y","mask"])",
                         R"(["nondeterministic_seeded"])"),
                    node("aten::sum", R"([{"t":"y"},null])", R"(["loss"])"),
                    node("aten::expand", R"([{"t":"t"},[2,4],false])", R"(["gy"])", R"(["view"])", "0"),
                    node("aten::native_dropout_backward", R"([{"t":"gy"},{"t":"mask"},{"f":2.0}])", R"(["gr"])"),
                    node("aten::threshold_backward", R"([{"t":"gr"},{"t":"saved"},0])", R"(["gm"])"),
                    node("aten::mm", R"([{"t":"x"},{"t":"gm"}])", R"(["gw"])")},
                ","));
  std::ofstream(dir + "golden.json") << doc;
  ir::Graph g = stepfile::load_step(dir + "golden.json", {});
  std::vector<std::string> lines;
  for (const ir::Node& n : g.nodes()) {
    std::string outs;
    for (ir::ValueId v : n.outputs) outs += (outs.empty() ? "" : ",") + g.value(v).name;
    lines.push_back(fmt::format("{} {} {} {}", ir::to_string(n.phase), outs.empty() ? "_" : outs,
                                ops::display_name(n),
                                n.attrs.has("tags") ? n.attrs.s("tags") : ""));
  }
  const std::vector<std::string> golden = {
      "fwd mm aten::mm ",
      "fwd relu aten::relu ",
      "fwd y.draw,mask aten::native_dropout random",
      "fwd y aten::native_dropout_backward ",
      "fwd loss aten::sum ",
      "bwd gy aten::expand view",
      "bwd gr aten::native_dropout_backward ",
      "bwd saved aten::detach view",  // sunk from the forward part to its reader
      "bwd gm aten::threshold_backward ",
      "bwd gw aten::mm ",
      "optim _ sgd_step ",
  };
  EXPECT_EQ(lines, golden) << fmt::format("{}", fmt::join(lines, "\n"));
  EXPECT_EQ(g.value(g.find("relu")).role, ir::Role::activation);  // the dropout output's recomputation reads it
  EXPECT_EQ(g.value(g.find("mask")).role, ir::Role::activation);
  EXPECT_EQ(g.value(g.find("y")).role, ir::Role::other);  // read by the sum only
  EXPECT_EQ(g.value(g.find("w")).init.kind, ir::Init::data);
  EXPECT_EQ(ops::bytes_moved(g, g.nodes()[0]), 32 + 64 + 32);  // mm: x and w read, its output written
  EXPECT_EQ(ops::bytes_moved(g, g.nodes()[5]), 4);              // expand: the tangent read, a view written
  EXPECT_EQ(g.value(g.find("input0")).role, ir::Role::input);
  EXPECT_EQ(g.value(g.find("t")).init.kind, ir::Init::ones);
}

}  // namespace
}  // namespace mutwo
