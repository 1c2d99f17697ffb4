// plan.json and plan.csv: every activation with its decision and recompute
// sources; plan.json read back, validated, and applied to a step.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ir/text.h"
#include "plan/plan.h"
#include "support/error.h"
#include "support/json_input.h"
#include "support/files.h"
#include "support/units.h"

namespace mutwo::plan {

using nlohmann::json;

std::vector<ir::ValueId> recompute_sources(const PlanInput& in, const std::vector<ir::ValueId>& drop, ir::ValueId v) {
  const ir::Graph& g = in.graph;
  ir::UseIndex uses(g);
  std::set<ir::ValueId> dropped(drop.begin(), drop.end());
  auto kept = [&](ir::ValueId x) {
    int32_t p = uses.producer[static_cast<size_t>(x)];
    if (p < 0) return true;
    if (dropped.count(x)) return false;
    for (int32_t u : uses.users[static_cast<size_t>(x)]) {
      ir::Phase ph = g.nodes()[static_cast<size_t>(u)].phase;
      if (ph == ir::Phase::backward || ph == ir::Phase::recompute) return true;
    }
    return false;
  };
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
      if (kept(in)) sources.push_back(in);
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
         {"version", kPlanVersion},
         {"model", in.profile.model},
         {"batch", in.profile.batch},
         {"graph_fingerprint", ir::fingerprint(g)},
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

SavedPlan read_plan(const std::string& path) {
  const json j = parse_json_input(read_file(path), path);
  MUTWO_CHECK(json_tag_is(j, "format", "mutwo.plan"),
              "{}: not a mutwo plan (no \"format\": \"mutwo.plan\"; write one with mutwo plan or optimize)", path);
  const int version = json_field<int>(j, "version", path);
  MUTWO_CHECK(version == kPlanVersion, "{}: plan format version {} is not supported (this mutwo reads version {}); plan again",
              path, version, kPlanVersion);
  SavedPlan s;
  s.model = json_field<std::string>(j, "model", path);
  s.batch = json_size(j, "batch", path);
  s.graph_fingerprint = json_field<std::string>(j, "graph_fingerprint", path);
  s.device = json_field<std::string>(j, "device", path);
  s.planner = json_field<std::string>(j, "planner", path);
  s.budget_bytes = json_size(j, "budget_bytes", path);
  // What the planner predicted is informative, but must be of the kind plan writes.
  for (const char* key : {"unplanned_peak_bytes", "predicted_peak_bytes", "dropped_bytes", "recompute_nodes", "dropped"})
    json_size(j, key, path);
  for (const char* key : {"predicted_extra_ms", "planning_ms"}) json_ms(j, key, path);
  json_field<bool>(j, "feasible", path);
  json_field<std::string>(j, "note", path);
  const json& acts = json_field<json>(j, "activations", path);
  MUTWO_CHECK(acts.is_array(), "{}: field 'activations' must be a list", path);
  std::set<std::string> names;
  int64_t dropped_bytes = 0;
  for (size_t i = 0; i < acts.size(); ++i) {
    const std::string where = fmt::format("{} activations[{}]", path, i);
    const json& a = acts[i];
    SavedPlan::Activation act;
    act.name = json_field<std::string>(a, "name", where);
    act.bytes = json_size(a, "bytes", where);
    MUTWO_CHECK(names.insert(act.name).second, "{}: '{}' is listed twice", where, act.name);
    const std::string decision = json_field<std::string>(a, "decision", where);
    MUTWO_CHECK(decision == "keep" || decision == "recompute", "{}: decision '{}' is neither keep nor recompute", where,
                decision);
    act.recompute = decision == "recompute";
    MUTWO_CHECK(act.recompute == a.contains("sources"), "{}: 'sources' belongs to a recomputed activation, and only to one",
                where);
    if (act.recompute) {
      json_field<std::vector<std::string>>(a, "sources", where);
      MUTWO_CHECK(dropped_bytes <= kMaxBytes - act.bytes, "{}: the recomputed activations hold more than 1 PiB", where);
      dropped_bytes += act.bytes;
    }
    s.activations.push_back(std::move(act));
  }
  // Counts that agree: what the summary says is what the list holds.
  const auto dropped = static_cast<int64_t>(
      std::count_if(s.activations.begin(), s.activations.end(), [](const SavedPlan::Activation& a) { return a.recompute; }));
  MUTWO_CHECK(j.at("dropped").get<int64_t>() == dropped,
              "{}: field 'dropped' is {}, but {} activations are recomputed", path, j.at("dropped").dump(), dropped);
  MUTWO_CHECK(j.at("dropped_bytes").get<int64_t>() == dropped_bytes,
              "{}: field 'dropped_bytes' is {}, but the recomputed activations hold {}", path, j.at("dropped_bytes").dump(),
              dropped_bytes);
  return s;
}

std::string plan_mismatch(const SavedPlan& s, const std::string& model, int64_t batch, const std::string& fingerprint) {
  if (s.model != model) return fmt::format("it was made for model '{}', not '{}'", s.model, model);
  if (s.batch != batch) return fmt::format("it was made for batch {}, not {}", s.batch, batch);
  if (s.graph_fingerprint != fingerprint)
    return fmt::format("it was made for another graph of {} (fingerprint {}, this step's is {}: another optimizer, "
                       "sequence length or mutwo version?)", model, s.graph_fingerprint, fingerprint);
  return {};
}

Plan apply_plan(const PlanInput& in, const SavedPlan& s) {
  const ir::Graph& g = in.graph;
  std::vector<const ir::Value*> acts;
  for (const ir::Value& v : g.values())
    if (v.role == ir::Role::activation) acts.push_back(&v);
  MUTWO_CHECK(acts.size() == s.activations.size(), "the plan lists {} activations, the step has {}", s.activations.size(),
              acts.size());
  std::vector<ir::ValueId> drop;
  for (size_t i = 0; i < acts.size(); ++i) {
    const SavedPlan::Activation& a = s.activations[i];
    MUTWO_CHECK(a.name == acts[i]->name && a.bytes == acts[i]->type.bytes(),
                "activations[{}]: the plan has %{} of {} bytes, the step %{} of {}", i, a.name, a.bytes, acts[i]->name,
                acts[i]->type.bytes());
    if (a.recompute) drop.push_back(acts[i]->id);
  }
  // Droppable means what the planners may drop: whole candidates (a view and
  // its base together), never what recomputation may not repeat.
  std::set<ir::ValueId> dropped(drop.begin(), drop.end());
  std::set<ir::ValueId> covered;
  for (const Candidate& c : candidates(in)) {
    const auto n = std::count_if(c.members.begin(), c.members.end(), [&](ir::ValueId v) { return dropped.count(v) > 0; });
    MUTWO_CHECK(n == 0 || static_cast<size_t>(n) == c.members.size(),
                "it recomputes only part of one storage (%{} and the activations sharing it go together)",
                g.value(c.owner).name);
    if (n) covered.insert(c.members.begin(), c.members.end());
  }
  for (ir::ValueId v : drop)
    MUTWO_CHECK(covered.count(v), "it recomputes %{}, which may not be recomputed (random, in place, or a view of a "
                                  "parameter)", g.value(v).name);
  return finish(in, s.planner, s.budget_bytes, std::move(drop));
}

}  // namespace mutwo::plan
