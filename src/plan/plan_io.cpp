// plan.json and plan.csv: every activation with its decision and recompute sources.
#include <fstream>
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

std::vector<ir::ValueId> recompute_sources(const PlanInput& in, const std::vector<ir::ValueId>& drop, ir::ValueId v) {
  const ir::Graph& g = in.graph;
  ir::UseIndex uses(g);
  const std::vector<bool> kept = rewrite::kept_at_backward(g, uses, drop);
  std::vector<ir::ValueId> sources;
  std::set<ir::ValueId> seen;
  std::vector<ir::ValueId> stack{v};
  while (!stack.empty()) {
    ir::ValueId x = stack.back();
    stack.pop_back();
    int32_t p = uses.producer[static_cast<size_t>(x)];
    if (p < 0) continue;
    for (ir::ValueId in : g.nodes()[static_cast<size_t>(p)].inputs) {
      if (in == ir::kNoValue || !seen.insert(in).second) continue;
      if (kept[static_cast<size_t>(in)]) sources.push_back(in);
      else stack.push_back(in);
    }
  }
  return sources;
}

void write_plan_json(const PlanInput& in, const Plan& p, int64_t unplanned_peak, const std::string& path) {
  const ir::Graph& g = in.graph;
  std::set<ir::ValueId> dropped(p.drop.begin(), p.drop.end());
  int64_t dropped_bytes = 0;
  json acts = json::array();
  for (const ir::Value& v : g.values()) {
    if (v.role != ir::Role::activation) continue;
    bool d = dropped.count(v.id) > 0;
    json a{{"name", v.name}, {"bytes", v.type.bytes()}, {"decision", d ? "recompute" : "keep"}};
    if (d) {
      dropped_bytes += v.type.bytes();
      json src = json::array();
      for (ir::ValueId s : recompute_sources(in, p.drop, v.id)) src.push_back(g.value(s).name);
      a["sources"] = src;
    }
    acts.push_back(a);
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
         {"activations", acts}};
  write_file(path, j.dump(1) + "\n");
}

void write_plan_csv(const PlanInput& in, const Plan& p, const std::string& path) {
  const ir::Graph& g = in.graph;
  std::set<ir::ValueId> dropped(p.drop.begin(), p.drop.end());
  OutFile out(path);
  out << "name,bytes,decision,sources\n";
  for (const ir::Value& v : g.values()) {
    if (v.role != ir::Role::activation) continue;
    bool d = dropped.count(v.id) > 0;
    std::string src;
    if (d)
      for (ir::ValueId s : recompute_sources(in, p.drop, v.id)) src += (src.empty() ? "" : "|") + g.value(s).name;
    out << v.name << "," << v.type.bytes() << "," << (d ? "recompute" : "keep") << "," << src << "\n";
  }
  out.commit();
}

std::vector<std::string> read_plan_drops(const std::string& path) {
  const json j = parse_json_input(read_file(path), path);
  MUTWO_CHECK(j.is_object() && j.value("format", "") == "mutwo.plan" && j.value("version", 0) == 1,
              "{}: not a mutwo plan of version 1", path);
  std::vector<std::string> drops;
  for (const auto& a : j.at("activations"))
    if (a.value("decision", "") == "recompute") drops.push_back(a.at("name").get<std::string>());
  return drops;
}

}  // namespace mutwo::plan
