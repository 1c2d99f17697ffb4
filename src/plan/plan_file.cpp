// plan.json and plan.csv: every activation with its decision, why, the
// planner's order, its recompute time and bytes per ms, and recompute sources;
// plan.json read back, validated, and applied to a step.
#include <algorithm>
#include <cstdint>
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <utility>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ir/text.h"
#include "analysis/liveness.h"
#include "ops/op.h"
#include "plan/plan_file.h"
#include "rewrite/recompute.h"
#include "support/error.h"
#include "support/json_input.h"
#include "support/files.h"
#include "support/units.h"

namespace mutwo::plan {

using nlohmann::json;

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
  for (size_t i = 0; i < p.order.size(); ++i) position[p.order[i].owner] = i;  // its last pick: a swap undone, then recomputed
  const RecomputeWalk walk(in, p.drop);
  const analysis::Liveness L = analysis::analyze_liveness(g);
  const std::set<ir::ValueId> swapped(p.swap.begin(), p.swap.end());  // storage owners
  const ir::UseIndex uses(g);
  std::vector<ActivationRecord> out;
  for (const ir::Value& v : g.values()) {
    if (v.role != ir::Role::activation) continue;
    ActivationRecord a;
    a.name = v.name;
    if (const int32_t made_by = uses.producer[static_cast<size_t>(v.id)]; made_by >= 0) {
      const ir::Node& n = g.nodes()[static_cast<size_t>(made_by)];
      a.module = n.scope;
      a.op = ops::op_name(n);
    }
    a.bytes = v.type.bytes();
    const bool d = dropped.count(v.id) > 0;
    const ir::ValueId storage = L.storage[static_cast<size_t>(v.id)];
    a.storage = g.value(storage).name;
    const bool w = swapped.count(storage) > 0;
    a.decision = d ? "recompute" : w ? "swap" : "keep";
    auto owner = owner_of.find(v.id);
    a.candidate = owner != owner_of.end();
    if (a.candidate) a.recompute_ms = walk.ms(v.id);
    auto pos = position.find(storage);
    if (pos != position.end()) {
      const Choice& c = p.order[pos->second];
      a.rank = static_cast<int32_t>(pos->second) + 1;
      a.score = c.score;
      a.reason = to_string(c.outcome);
    } else if (w) {
      a.reason = fmt::format("swapped by {}", p.planner);
    } else if (!a.candidate) {
      a.reason = "not recomputable";
    } else if (!p.from.empty()) {  // mutwo took another planner's plan
      a.reason = fmt::format("{} by {}", d ? "chosen" : "kept", p.from);
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
  json acts = json::array();
  for (const ActivationRecord& r : activation_records(in, p)) {
    json a{{"name", r.name},
           {"bytes", r.bytes},
           {"decision", r.decision},
           {"reason", r.reason},
           {"rank", r.rank > 0 ? json(r.rank) : json()},
           {"score", r.rank > 0 ? json(r.score) : json()},
           {"recompute_ms", r.candidate ? json(r.recompute_ms) : json()},
           {"ratio", r.candidate && r.recompute_ms > 0 ? json(r.ratio()) : json()},
           {"module", r.module},
           {"op", r.op}};
    if (r.storage != r.name) a["storage"] = r.storage;  // a view: memory-viewer frames name its storage
    if (r.decision == "recompute") a["sources"] = r.sources;
    acts.push_back(a);
  }
  const ir::Graph& g = in.graph;
  json swapped = json::array();
  for (ir::ValueId v : p.swap) {
    const ir::Value& val = g.value(v);
    swapped.push_back({{"name", val.name}, {"bytes", val.type.bytes()}, {"role", std::string(ir::to_string(val.role))}});
  }
  json chunks = json::array();
  for (const ChunkChoice& c : p.chunks) {
    const ir::Node& node = g.nodes()[static_cast<size_t>(c.node)];
    chunks.push_back({{"node", g.value(node.outputs.at(0)).name}, {"op", node.op}, {"chunk_rows", c.rows}});
  }
  json decided = json::array();
  for (const Decision& d : decisions(in, p))
    decided.push_back({{"kind", d.kind}, {"count", d.count}, {"bytes", d.bytes},
                       {"peak_without_bytes", d.peak_without_bytes}, {"lowered_bytes", d.lowered_bytes},
                       {"text", d.text}});
  json replayed = json::array();
  for (const ReplayedNode& r : replayed_random(in, p))
    replayed.push_back({{"node", r.node}, {"op", r.op}, {"state", r.state}, {"state_bytes", r.state_bytes}});
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
         {"dropped_bytes", dropped_bytes(g, p)},
         {"swapped_bytes", swapped_bytes(g, p)},
         {"predicted_swap_ms", p.predicted.swap_ms},
         {"host_peak_bytes", p.predicted.host_peak_bytes},
         {"update_early", p.update_early},
         {"feasible", p.feasible},
         {"planning_ms", p.planning_ms},
         {"note", p.note},
         {"activations", acts},
         {"swapped", swapped},
         {"chunks", chunks},
         {"replayed", replayed},
         {"decisions", decided}};
  write_file(path, j.dump(1) + "\n");
}

void write_plan_csv(const PlanInput& in, const Plan& p, const std::string& path) {
  OutFile out(path);
  out << "name,bytes,decision,sources,rank,recompute_ms,ratio,reason,score,module,op\n";
  for (const ActivationRecord& r : activation_records(in, p)) {
    std::string src;
    for (const std::string& s : r.sources) src += (src.empty() ? "" : "|") + s;
    out << fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", r.name, r.bytes, r.decision, src,
                       r.rank > 0 ? std::to_string(r.rank) : "", r.candidate ? fmt::format("{:.6f}", r.recompute_ms) : "",
                       r.candidate && r.recompute_ms > 0 ? fmt::format("{:.1f}", r.ratio()) : "", r.reason,
                       r.rank > 0 ? fmt::format("{:.1f}", r.score) : "", r.module, r.op);
  }
  out.commit();
}

namespace {

// One entry of plan.json's `activations`, with the planner's reasoning
// (mutwo report --plan shows it: informative, but of the kind plan writes).
ActivationRecord read_activation(const json& a, const std::string& where, int version) {
  ActivationRecord act;
  act.name = json_field<std::string>(a, "name", where);
  act.bytes = json_size(a, "bytes", where);
  act.decision = json_field<std::string>(a, "decision", where);
  MUTWO_CHECK(act.decision == "keep" || act.recomputed() || (act.swapped() && version >= 3),
              "{}: decision '{}' is none of keep, recompute{}", where, act.decision, version >= 3 ? ", swap" : "");
  auto present = [&](const char* key) { return a.contains(key) && !a.at(key).is_null(); };
  if (present("rank")) {
    const int64_t rank = json_size(a, "rank", where);
    MUTWO_CHECK(rank >= 1 && rank <= INT32_MAX, "{}: field 'rank' counts from 1 to {}, got {}", where, INT32_MAX, rank);
    act.rank = static_cast<int32_t>(rank);
  }
  if (present("score")) act.score = json_non_negative<double>(a, "score", where);
  if (present("ratio")) json_non_negative<double>(a, "ratio", where);
  act.candidate = present("recompute_ms");
  if (act.candidate) act.recompute_ms = json_ms(a, "recompute_ms", where);
  if (a.contains("reason")) act.reason = json_field<std::string>(a, "reason", where);
  if (a.contains("module")) act.module = json_field<std::string>(a, "module", where);
  if (a.contains("op")) act.op = json_field<std::string>(a, "op", where);
  MUTWO_CHECK(act.recomputed() == a.contains("sources"),
              "{}: 'sources' belongs to a recomputed activation, and only to one", where);
  if (act.recomputed()) act.sources = json_field<std::vector<std::string>>(a, "sources", where);
  return act;
}

// A list field's entries, each read by `entry(item, "PATH field[i]")`.
template <typename Fn>
void read_list(const json& j, const char* key, const std::string& path, Fn entry) {
  const json& list = json_field<json>(j, key, path);
  MUTWO_CHECK(list.is_array(), "{}: field '{}' must be a list", path, key);
  for (size_t i = 0; i < list.size(); ++i) entry(list[i], fmt::format("{} {}[{}]", path, key, i));
}

// A summary field that must equal what its list holds ("... but " + `what`).
void check_total(const json& j, const char* key, int64_t total, const std::string& path, const std::string& what) {
  MUTWO_CHECK(j.at(key).get<int64_t>() == total, "{}: field '{}' is {}, but {}", path, key, j.at(key).dump(), what);
}

// The activations, each listed once, and the summary's counts of them.
void read_activations(const json& j, const std::string& path, int version, SavedPlan& s) {
  std::set<std::string> names;
  int64_t dropped = 0;
  read_list(j, "activations", path, [&](const json& a, const std::string& where) {
    ActivationRecord act = read_activation(a, where, version);
    MUTWO_CHECK(names.insert(act.name).second, "{}: '{}' is listed twice", where, act.name);
    if (act.recomputed()) {
      MUTWO_CHECK(s.dropped_bytes <= kMaxBytes - act.bytes, "{}: the recomputed activations hold more than 1 PiB", where);
      s.dropped_bytes += act.bytes;
      ++dropped;
    }
    s.activations.push_back(std::move(act));
  });
  check_total(j, "dropped", dropped, path, fmt::format("{} activations are recomputed", dropped));
  check_total(j, "dropped_bytes", s.dropped_bytes, path,
              fmt::format("the recomputed activations hold {}", s.dropped_bytes));
}

// Version 3: the storages swapped to host memory, each listed once.
void read_swapped(const json& j, const std::string& path, SavedPlan& s) {
  if (j.contains("update_early")) s.update_early = json_field<bool>(j, "update_early", path);
  for (const char* key : {"swapped_bytes", "host_peak_bytes"}) json_size(j, key, path);
  json_ms(j, "predicted_swap_ms", path);
  std::set<std::string> seen;
  int64_t swapped_bytes = 0;
  read_list(j, "swapped", path, [&](const json& w, const std::string& where) {
    const std::string name = json_field<std::string>(w, "name", where);
    const int64_t bytes = json_size(w, "bytes", where);
    json_field<std::string>(w, "role", where);
    MUTWO_CHECK(seen.insert(name).second, "{}: '{}' is listed twice", where, name);
    MUTWO_CHECK(swapped_bytes <= kMaxBytes - bytes, "{}: the swapped storages hold more than 1 PiB", where);
    swapped_bytes += bytes;
    s.swap.emplace_back(name, bytes);
  });
  check_total(j, "swapped_bytes", swapped_bytes, path, fmt::format("the swapped storages hold {}", swapped_bytes));
}

}  // namespace

SavedPlan read_plan(const std::string& path) {
  const json j = parse_json_input(read_file(path), path);
  MUTWO_CHECK(json_tag_is(j, "format", "mutwo.plan"),
              "{}: not a mutwo plan (no \"format\": \"mutwo.plan\"; write one with mutwo plan or optimize)", path);
  const int version = json_field<int>(j, "version", path);
  MUTWO_CHECK(version >= 2 && version <= kPlanVersion,
              "{}: plan format version {} is not supported (this mutwo reads versions 2 to {}); plan again", path, version,
              kPlanVersion);
  SavedPlan s;
  s.model = json_field<std::string>(j, "model", path);
  s.batch = json_size(j, "batch", path);
  s.graph_fingerprint = json_field<std::string>(j, "graph_fingerprint", path);
  s.device = json_field<std::string>(j, "device", path);
  s.planner = json_field<std::string>(j, "planner", path);
  s.budget_bytes = json_size(j, "budget_bytes", path);
  // What the planner predicted is informative, but must be of the kind plan writes.
  s.unplanned_peak_bytes = json_size(j, "unplanned_peak_bytes", path);
  s.predicted_peak_bytes = json_size(j, "predicted_peak_bytes", path);
  for (const char* key : {"dropped_bytes", "recompute_nodes", "dropped"}) json_size(j, key, path);
  s.predicted_extra_ms = json_ms(j, "predicted_extra_ms", path);
  json_ms(j, "planning_ms", path);
  s.feasible = json_field<bool>(j, "feasible", path);
  s.note = json_field<std::string>(j, "note", path);
  read_activations(j, path, version, s);
  if (version >= 3) read_swapped(j, path, s);
  if (j.contains("chunks"))  // absent in plans written before the chunked loss
    read_list(j, "chunks", path, [&](const json& c, const std::string& where) {
      const std::string node = json_field<std::string>(c, "node", where);
      const int64_t rows = json_size(c, "chunk_rows", where);
      MUTWO_CHECK(rows > 0, "{}: field 'chunk_rows' must be positive", where);
      s.chunks.emplace_back(node, rows);
    });
  if (j.contains("decisions"))  // absent in plans written before them
    read_list(j, "decisions", path, [&](const json& d, const std::string& where) {
      Decision x;
      x.kind = json_field<std::string>(d, "kind", where);
      x.count = static_cast<int32_t>(std::min<int64_t>(json_size(d, "count", where), INT32_MAX));
      x.bytes = json_size(d, "bytes", where);
      x.peak_without_bytes = json_size(d, "peak_without_bytes", where);
      x.lowered_bytes = json_field<int64_t>(d, "lowered_bytes", where);
      x.text = json_field<std::string>(d, "text", where);
      s.decisions.push_back(std::move(x));
    });
  if (version >= 4) {
    s.replayed.emplace();
    read_list(j, "replayed", path, [&](const json& r, const std::string& where) {
      s.replayed->push_back(json_field<std::string>(r, "node", where));
      for (const char* key : {"op", "state"}) json_field<std::string>(r, key, where);
      json_size(r, "state_bytes", where);
    });
  }
  return s;
}

std::string plan_mismatch(const SavedPlan& s, const std::string& model, int64_t batch, const std::string& fingerprint) {
  if (s.model != model) return fmt::format("it was made for model '{}', not '{}'", s.model, model);
  if (s.batch != batch) return fmt::format("it was made for batch {}, not {}", s.batch, batch);
  if (s.graph_fingerprint != fingerprint)
    return fmt::format("it was made for another graph of {} (fingerprint {}, this step's is {}: another optimizer, "
                       "sequence length, image size or mutwo version?)", model, s.graph_fingerprint, fingerprint);
  return {};
}

void check_saved(const SavedPlan& s, const std::string& path, const std::string& model, int64_t batch,
                 const ir::Graph& g) {
  const std::string why = plan_mismatch(s, model, batch, ir::fingerprint(g));
  MUTWO_CHECK(why.empty(), "--plan {}: {}; plan this step instead (mutwo optimize --budget ...)", path, why);
}

Plan apply_saved(const PlanInput& in, const SavedPlan& s, const std::string& path) {
  try {
    return apply_plan(in, s);
  } catch (const UserError& e) {
    MUTWO_FAIL("--plan {}: {}", path, e.what());
  }
}

Plan apply_plan(const PlanInput& in, const SavedPlan& s) {
  const ir::Graph& g = in.graph;
  std::vector<const ir::Value*> acts;
  for (const ir::Value& v : g.values())
    if (v.role == ir::Role::activation) acts.push_back(&v);
  MUTWO_CHECK(acts.size() == s.activations.size(), "the plan lists {} activations, the step has {}", s.activations.size(),
              acts.size());
  // The storages it swaps: each one the step has, of its size, and one the planners may swap.
  std::vector<ir::ValueId> swap;
  const std::vector<ir::ValueId> swappable = swap_candidates(in);
  for (const auto& [name, bytes] : s.swap) {
    const ir::ValueId v = g.find(name);
    MUTWO_CHECK(v != ir::kNoValue && g.type(v).bytes() == bytes, "it swaps %{} of {} bytes, which the step does not have",
                name, bytes);
    MUTWO_CHECK(std::find(swappable.begin(), swappable.end(), v) != swappable.end(),
                "it swaps %{}, which cannot be swapped (not idle across a part of the step, a view, or persistent)", name);
    MUTWO_CHECK(!s.update_early || g.value(v).role != ir::Role::gradient,
                "it swaps the gradient %{} but updates early, which uses each gradient as soon as it is made", name);
    swap.push_back(v);
  }
  MUTWO_CHECK(swap.empty() || (in.h2d_bytes_per_ms > 0 && in.d2h_bytes_per_ms > 0),
              "it swaps {} storages, but the profile has no copy bandwidth; profile again with this mutwo", swap.size());
  const analysis::Liveness L = analysis::analyze_liveness(g);
  const std::set<ir::ValueId> swapped(swap.begin(), swap.end());
  std::vector<ir::ValueId> drop;
  for (size_t i = 0; i < acts.size(); ++i) {
    const ActivationRecord& a = s.activations[i];
    MUTWO_CHECK(a.name == acts[i]->name && a.bytes == acts[i]->type.bytes(),
                "activations[{}]: the plan has %{} of {} bytes, the step %{} of {}", i, a.name, a.bytes, acts[i]->name,
                acts[i]->type.bytes());
    MUTWO_CHECK(a.swapped() == (swapped.count(L.storage[static_cast<size_t>(acts[i]->id)]) > 0),
                "activations[{}]: %{} is {} swap, but its storage is {} the swapped list", i, a.name,
                a.swapped() ? "marked" : "not marked", a.swapped() ? "not in" : "in");
    if (a.recomputed()) drop.push_back(acts[i]->id);
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
    MUTWO_CHECK(covered.count(v), "it recomputes %{}, which may not be recomputed (in place, a view of a parameter, "
                                  "or random under --cuda-graph)", g.value(v).name);
  // The vocabulary chunks it chose, on the nodes of this graph that make them.
  std::vector<ChunkChoice> chunks;
  const ir::UseIndex uses(g);
  for (const auto& [name, rows] : s.chunks) {
    const ir::ValueId v = g.find(name);
    const int32_t node = v == ir::kNoValue ? -1 : uses.producer[static_cast<size_t>(v)];
    MUTWO_CHECK(node >= 0 && (g.nodes()[static_cast<size_t>(node)].op == "linear_cross_entropy" ||
                              g.nodes()[static_cast<size_t>(node)].op == "linear_cross_entropy_backward"),
                "its chunks name %{}, which no linear_cross_entropy node of the step makes", name);
    chunks.push_back({node, rows});
  }
  PlanInput chunked = in;
  apply_chunks(chunked, chunks);
  Plan p = finish(chunked, s.planner, s.budget_bytes, std::move(drop), std::move(swap), s.update_early);
  p.chunks = std::move(chunks);
  if (s.replayed) {  // version 4: the random nodes it replays are the ones its rewrite replays
    std::vector<std::string> now;
    for (const ReplayedNode& r : replayed_random(in, p)) now.push_back(r.node);
    MUTWO_CHECK(now == *s.replayed, "it replays the random nodes [{}], but its drops replay [{}] in this step",
                fmt::join(*s.replayed, ", "), fmt::join(now, ", "));
  }
  return p;
}

}  // namespace mutwo::plan
