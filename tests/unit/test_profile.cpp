// Profiler tests: roles and lifetimes of a known graph, CPU accuracy (measured
// live bytes equal the liveness prediction node by node), timing coverage,
// profile.json round trip and its errors, stable CSV headers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "autodiff/autodiff.h"
#include "models/model.h"
#include "profile/profiler.h"
#include "report/report.h"
#include "runtime/memory.h"
#include "support/error.h"

namespace mutwo {
namespace {

ir::Graph small_mlp_step(double dropout = 0.1) {
  models::MlpConfig c;
  c.batch = 16;
  c.in_features = 32;
  c.hidden = 24;
  c.dropout = dropout;
  models::Model m = models::build_mlp(c);
  return autodiff::build_training_step(std::move(m.graph), m.loss, {});
}

const profile::ValueRecord& value(const profile::Profile& p, const std::string& name) {
  for (const auto& v : p.values)
    if (v.name == name) return v;
  throw std::runtime_error("no value " + name);
}

profile::Profile profile_cpu(const ir::Graph& g, int iters = 3) {
  runtime::track_cpu_memory();
  profile::ProfileOptions o;
  o.iters = iters;
  o.progress = false;
  o.model = "test";
  return profile::profile_step(g, o);
}

TEST(Profile, RolesAndLifetimesOfTheMlp) {
  profile::Profile p = profile::describe(small_mlp_step());
  EXPECT_EQ(value(p, "x").role, ir::Role::input);
  EXPECT_EQ(value(p, "labels").role, ir::Role::input);
  for (const char* w : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "head.weight", "head.bias"}) {
    EXPECT_EQ(value(p, w).role, ir::Role::parameter) << w;
    EXPECT_EQ(value(p, std::string(w) + ".grad").role, ir::Role::gradient) << w;
    EXPECT_EQ(value(p, std::string(w) + ".momentum").role, ir::Role::optimizer_state) << w;
  }
  std::set<std::string> activations;
  for (const auto& v : p.values)
    if (v.role == ir::Role::activation) activations.insert(v.name);
  // relu's backward reads its output; dropout's reads the mask; the next
  // linear's weight gradient reads the dropped-out input; log_softmax's and
  // nll_loss's backward read log_softmax's output. nll_loss's total weight is
  // read only by the backward pass: no forward use, so not an activation.
  std::set<std::string> expected{"fc1.relu", "fc1.dropout_mask", "fc1.dropout", "fc2.relu", "fc2.dropout_mask",
                                 "fc2.dropout", "loss.log_softmax"};
  EXPECT_EQ(value(p, "loss.total_weight").role, ir::Role::other);
  EXPECT_EQ(activations, expected);
  for (const auto& v : p.values)
    if (v.role == ir::Role::activation) {
      EXPECT_GE(v.last_fwd, 0) << v.name;
      EXPECT_LT(v.last_fwd, v.first_bwd) << v.name;
      EXPECT_LE(v.first_bwd, v.last_bwd) << v.name;
    }
  EXPECT_TRUE(value(p, "fc1.dropout_mask").random);
  EXPECT_FALSE(value(p, "fc1.dropout").random);
}

TEST(Profile, CpuLiveBytesEqualTheLivenessPredictionAtEveryNode) {
  for (double dropout : {0.0, 0.1}) {
    profile::Profile p = profile_cpu(small_mlp_step(dropout));
    ASSERT_FALSE(p.nodes.empty());
    for (const auto& n : p.nodes) {
      EXPECT_EQ(n.live_after, n.predicted_live_after) << "node " << n.rank << " " << n.op;
      EXPECT_GE(n.workspace_bytes, 0) << "node " << n.rank << " " << n.op;
    }
    int64_t by_role = 0;
    for (int64_t b : p.peak_by_role) by_role += b;
    EXPECT_EQ(by_role + p.peak_workspace_bytes, p.peak_bytes);
  }
}

// The same for a small BERT and ResNet: what is live after every node is what
// the liveness analysis says (kernel workspace is transient and excluded).
TEST(Profile, CpuLiveBytesMatchForSmallBertAndResnet) {
  for (const char* name : {"bert-tiny", "resnet-18"}) {
    models::ModelOptions o;
    o.name = name;
    o.batch = 2;
    if (std::string(name) == "bert-tiny") o.seq = 16;
    else o.image_size = 32;
    models::Model m = models::build_model(o);
    profile::Profile p = profile_cpu(autodiff::build_training_step(std::move(m.graph), m.loss, {}), 1);
    int mismatches = 0;
    for (const auto& n : p.nodes)
      if (n.live_after != n.predicted_live_after && mismatches++ < 5)
        ADD_FAILURE() << name << " node " << n.rank << " " << n.op << ": measured " << n.live_after << ", predicted "
                      << n.predicted_live_after;
    EXPECT_EQ(mismatches, 0) << name;
  }
}

TEST(Profile, NodeTimesCoverTheStep) {
  // A step large enough that per-node timer overhead is small against it.
  models::MlpConfig c;
  c.batch = 128;
  c.hidden = 512;
  models::Model m = models::build_mlp(c);
  profile::Profile p = profile_cpu(autodiff::build_training_step(std::move(m.graph), m.loss, {}), 5);
  EXPECT_GT(p.step_ms, 0);
  EXPECT_NEAR(p.node_ms_sum, p.step_ms, 0.10 * p.step_ms) << "per-node times should sum to the step's wall time";
  double idle = value(p, "fc1.relu").idle_ms;
  EXPECT_GT(idle, 0);
  EXPECT_LT(idle, p.step_ms);
}

TEST(Profile, JsonRoundTrip) {
  profile::Profile p = profile_cpu(small_mlp_step(), 1);
  std::string text = profile::to_json_text(p);
  profile::Profile back = profile::from_json_text(text, "mem");
  EXPECT_EQ(profile::to_json_text(back), text);
  EXPECT_EQ(back.nodes.size(), p.nodes.size());
  EXPECT_EQ(back.peak_bytes, p.peak_bytes);
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    profile::from_json_text(text, "DIR/profile.json");
    ADD_FAILURE() << "expected an error containing " << needle;
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("DIR/profile.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(Profile, BadFilesGiveClearErrors) {
  std::string good = profile::to_json_text(profile::describe(small_mlp_step()));
  expect_error(good.substr(0, good.size() / 2), "truncated");
  expect_error("{\"format\": \"something else\"}", "not a mutwo profile");
  std::string v9 = good;
  v9.replace(v9.find("\"version\": 1"), 12, "\"version\": 9");
  expect_error(v9, "version 9 is not supported");
  std::string no_nodes = good;
  no_nodes.replace(no_nodes.find("\"nodes\""), 7, "\"nodez\"");
  expect_error(no_nodes, "missing field 'nodes'");
  try {
    profile::read_profile("/nonexistent/profile.json");
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/profile.json"), std::string::npos);
  }
}

TEST(Profile, CsvHeadersAreStable) {
  EXPECT_STREQ(report::kNodesCsvHeader,
               "rank,name,op,phase,scope,ms,live_before_bytes,live_after_bytes,peak_during_bytes,workspace_bytes,"
               "predicted_live_after_bytes,flops,input_roles,output_roles,bytes_moved");
  EXPECT_STREQ(report::kActivationsCsvHeader, "name,bytes,def,last_fwd,first_bwd,last_bwd,idle_ms,random,view");
  profile::Profile p = profile_cpu(small_mlp_step(), 1);
  auto dir = std::filesystem::temp_directory_path() / "mutwo_csv_test";
  std::filesystem::create_directories(dir);
  report::write_nodes_csv(p, (dir / "nodes.csv").string());
  report::write_activations_csv(p, (dir / "activations.csv").string());
  std::ifstream nodes(dir / "nodes.csv"), acts(dir / "activations.csv");
  std::string line;
  int rows = -1;
  while (std::getline(nodes, line)) ++rows;
  EXPECT_EQ(rows, static_cast<int>(p.nodes.size()));
  rows = -1;
  while (std::getline(acts, line)) ++rows;
  EXPECT_EQ(rows, 7);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mutwo
