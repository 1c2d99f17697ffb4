// plan.json and plan.csv: every activation with its decision, why, the
// planner's order, its recompute time and bytes per ms, and recompute sources.
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "plan/plan.h"
#include "rewrite/recompute.h"
#include "support/error.h"
#include "support/json_input.h"
#include "support/files.h"

namespace mutwo::plan {

using nlohmann::json;

namespace {

// What recomputing a value under a drop list crosses: the producers up to
// kept values (or values without a producer). One index for many walks.
class RecomputeWalk {
 public:
  RecomputeWalk(const PlanInput& in, const std::vector<ir::ValueId>& drop)
      : in_(in), uses_(in.graph), kept_(rewrite::kept_at_backward(in.graph, uses_, drop)) {}

  // Calls on_node for every producer node walked from `v` and on_source for
  // every kept value reached.
  template <typename NodeFn, typename SourceFn>
  void operator()(ir::ValueId v, NodeFn on_node, SourceFn on_source) const {
    const ir::Graph& g = in_.graph;
    std::set<ir::ValueId> seen;
    std::set<int32_t> walked;
    std::vector<ir::ValueId> stack{v};
    while (!stack.empty()) {
      ir::ValueId x = stack.back();
      stack.pop_back();
      int32_t p = uses_.producer[static_cast<size_t>(x)];
      if (p < 0 || !walked.insert(p).second) continue;
      on_node(p);
      for (ir::ValueId in : g.nodes()[static_cast<size_t>(p)].inputs) {
        if (in == ir::kNoValue || !seen.insert(in).second) continue;
        if (kept(in)) on_source(in);
        else stack.push_back(in);
      }
    }
  }

  std::vector<ir::ValueId> sources(ir::ValueId v) const {
    std::vector<ir::ValueId> out;
    (*this)(v, [](int32_t) {}, [&](ir::ValueId s) { out.push_back(s); });
    return out;
  }
  double ms(ir::ValueId v) const {
    double t = 0;
    (*this)(v, [&](int32_t n) { t += in_.node_ms[static_cast<size_t>(n)]; }, [](ir::ValueId) {});
    return t;
  }

 private:
  // Kept at backward time, by the rewrite's own rule.
  bool kept(ir::ValueId x) const { return kept_[static_cast<size_t>(x)]; }

  const PlanInput& in_;
  ir::UseIndex uses_;
  std::vector<bool> kept_;
};

}  // namespace

std::vector<ir::ValueId> recompute_sources(const PlanInput& in, const std::vector<ir::ValueId>& drop, ir::ValueId v) {
  return RecomputeWalk(in, drop).sources(v);
}

double recompute_ms(const PlanInput& in, const std::vector<ir::ValueId>& drop, ir::ValueId v) {
  return RecomputeWalk(in, drop).ms(v);
}

const char* to_string(Choice::Outcome o) {
  switch (o) {
    case Choice::Outcome::dropped: return "picked";
    case Choice::Outcome::raised_peak: return "raised the peak";
    case Choice::Outcome::taken_back: return "taken back";
  }
  return "?";
}

std::vector<ActivationRecord> activation_records(const PlanInput& in, const Plan& p) {
  const ir::Graph& g = in.graph;
  std::set<ir::ValueId> dropped(p.drop.begin(), p.drop.end());
  std::map<ir::ValueId, ir::ValueId> owner_of;  // candidate member -> its storage
  for (const Candidate& c : candidates(in))
    for (ir::ValueId m : c.members) owner_of[m] = c.owner;
  std::map<ir::ValueId, size_t> position;  // storage -> index in p.order
  for (size_t i = 0; i < p.order.size(); ++i) position.emplace(p.order[i].owner, i);
  const RecomputeWalk walk(in, p.drop);
  std::vector<ActivationRecord> out;
  for (const ir::Value& v : g.values()) {
    if (v.role != ir::Role::activation) continue;
    ActivationRecord a;
    a.name = v.name;
    a.bytes = v.type.bytes();
    const bool d = dropped.count(v.id) > 0;
    a.decision = d ? "recompute" : "keep";
    auto owner = owner_of.find(v.id);
    a.candidate = owner != owner_of.end();
    if (a.candidate) a.recompute_ms = walk.ms(v.id);
    auto pos = a.candidate ? position.find(owner->second) : position.end();
    if (pos != position.end()) {
      const Choice& c = p.order[pos->second];
      a.rank = static_cast<int32_t>(pos->second) + 1;
      a.score = c.score;
      a.reason = to_string(c.outcome);
    } else if (!a.candidate) {
      a.reason = "not recomputable";
    } else if (p.planner == "mutwo" && p.order.empty() && p.feasible) {
      a.reason = "not needed: the step fits unplanned";
    } else if (!p.order.empty() || p.planner == "mutwo") {
      a.reason = "not picked";
    } else {
      a.reason = fmt::format("{} by {}", d ? "chosen" : "kept", p.planner);
    }
    if (d)
      for (ir::ValueId s : walk.sources(v.id)) a.sources.push_back(g.value(s).name);
    out.push_back(std::move(a));
  }
  return out;
}

void write_plan_json(const PlanInput& in, const Plan& p, int64_t unplanned_peak, const std::string& path) {
  int64_t dropped_bytes = 0;
  json acts = json::array();
  for (const ActivationRecord& r : activation_records(in, p)) {
    json a{{"name", r.name},
           {"bytes", r.bytes},
           {"decision", r.decision},
           {"reason", r.reason},
           {"rank", r.rank > 0 ? json(r.rank) : json()},
           {"score", r.rank > 0 ? json(r.score) : json()},
           {"recompute_ms", r.candidate ? json(r.recompute_ms) : json()},
           {"ratio", r.candidate && r.recompute_ms > 0 ? json(r.ratio()) : json()}};
    if (r.decision == "recompute") {
      dropped_bytes += r.bytes;
      a["sources"] = r.sources;
    }
    acts.push_back(a);
  }
  const ir::Graph& g = in.graph;
  json chunks = json::array();
  for (const ChunkChoice& c : p.chunks) {
    const ir::Node& node = g.nodes()[static_cast<size_t>(c.node)];
    chunks.push_back({{"node", g.value(node.outputs.at(0)).name}, {"op", node.op}, {"chunk_rows", c.rows}});
  }
  json j{{"format", "mutwo.plan"},
         {"version", 1},
         {"model", in.profile.model},
         {"batch", in.profile.batch},
         {"device", in.profile.device},
         {"planner", p.planner},
         {"budget_bytes", p.budget_bytes},
         {"unplanned_peak_bytes", unplanned_peak},
         {"predicted_peak_bytes", p.predicted.peak_bytes},
         {"predicted_extra_ms", p.predicted.extra_ms},
         {"recompute_nodes", p.predicted.recompute_nodes},
         {"dropped", p.drop.size()},
         {"dropped_bytes", dropped_bytes},
         {"feasible", p.feasible},
         {"planning_ms", p.planning_ms},
         {"note", p.note},
         {"activations", acts},
         {"chunks", chunks}};
  write_file(path, j.dump(1) + "\n");
}

void write_plan_csv(const PlanInput& in, const Plan& p, const std::string& path) {
  OutFile out(path);
  out << "name,bytes,decision,sources,rank,recompute_ms,ratio,reason,score\n";
  for (const ActivationRecord& r : activation_records(in, p)) {
    std::string src;
    for (const std::string& s : r.sources) src += (src.empty() ? "" : "|") + s;
    out << fmt::format("{},{},{},{},{},{},{},{},{}\n", r.name, r.bytes, r.decision, src,
                       r.rank > 0 ? std::to_string(r.rank) : "", r.candidate ? fmt::format("{:.6f}", r.recompute_ms) : "",
                       r.candidate && r.recompute_ms > 0 ? fmt::format("{:.1f}", r.ratio()) : "", r.reason,
                       r.rank > 0 ? fmt::format("{:.1f}", r.score) : "");
  }
  out.commit();
}

PlanFile read_plan_file(const std::string& path) {
  const json j = parse_json_input(read_file(path), path);
  MUTWO_CHECK(j.is_object() && j.value("format", "") == "mutwo.plan" && j.value("version", 0) == 1,
              "{}: not a mutwo plan of version 1 (write one with mutwo plan --out)", path);
  try {
    PlanFile f;
    f.model = j.at("model").get<std::string>();
    f.batch = j.at("batch").get<int64_t>();
    f.device = j.at("device").get<std::string>();
    f.planner = j.at("planner").get<std::string>();
    f.note = j.value("note", "");
    f.budget_bytes = j.at("budget_bytes").get<int64_t>();
    f.unplanned_peak_bytes = j.at("unplanned_peak_bytes").get<int64_t>();
    f.predicted_peak_bytes = j.at("predicted_peak_bytes").get<int64_t>();
    f.predicted_extra_ms = j.at("predicted_extra_ms").get<double>();
    f.dropped_bytes = j.at("dropped_bytes").get<int64_t>();
    f.feasible = j.at("feasible").get<bool>();
    for (const auto& a : j.at("activations")) {
      ActivationRecord r;
      r.name = a.at("name").get<std::string>();
      r.bytes = a.at("bytes").get<int64_t>();
      r.decision = a.at("decision").get<std::string>();
      MUTWO_CHECK(r.decision == "recompute" || r.decision == "keep", "{}: activation {} has decision '{}' (recompute or keep)",
                  path, r.name, r.decision);
      r.reason = a.value("reason", "");
      if (a.contains("rank") && !a["rank"].is_null()) r.rank = a["rank"].get<int32_t>();
      if (a.contains("score") && !a["score"].is_null()) r.score = a["score"].get<double>();
      r.candidate = a.contains("recompute_ms") && !a["recompute_ms"].is_null();
      if (r.candidate) r.recompute_ms = a["recompute_ms"].get<double>();
      if (a.contains("sources")) r.sources = a["sources"].get<std::vector<std::string>>();
      f.activations.push_back(std::move(r));
    }
    return f;
  } catch (const json::exception& e) {
    MUTWO_FAIL("{}: a field is missing or of the wrong type ({}); write the plan again with mutwo plan", path, e.what());
  }
}

std::vector<std::string> read_plan_drops(const std::string& path) {
  std::vector<std::string> drops;
  for (const ActivationRecord& a : read_plan_file(path).activations)
    if (a.decision == "recompute") drops.push_back(a.name);
  return drops;
}

}  // namespace mutwo::plan
