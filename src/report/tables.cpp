// CSV tables and the Chrome trace of a Profile.
#include <filesystem>
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "report/report.h"
#include "report/snapshot.h"
#include "support/error.h"
#include "support/files.h"

namespace mutwo::report {

const char* const kNodesCsvHeader =
    "rank,name,op,phase,scope,ms,live_before_bytes,live_after_bytes,peak_during_bytes,workspace_bytes,"
    "predicted_live_after_bytes,flops,input_roles,output_roles,bytes_moved";
const char* const kActivationsCsvHeader = "name,bytes,def,last_fwd,first_bwd,last_bwd,idle_ms,random,view";

namespace {


// A CSV cell: quoted when it holds a comma or a quote.
std::string cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string roles(const std::vector<ir::Role>& rs) {
  std::string s;
  for (size_t i = 0; i < rs.size(); ++i) s += (i ? "|" : "") + std::string(ir::to_string(rs[i]));
  return s;
}

}  // namespace

void write_nodes_csv(const profile::Profile& p, const std::string& path) {
  OutFile out(path);
  out << kNodesCsvHeader << "\n";
  for (const auto& n : p.nodes)
    out << fmt::format("{},{},{},{},{},{:.6f},{},{},{},{},{},{:.0f},{},{},{}\n", n.rank, cell(n.name), n.op,
                       ir::to_string(n.phase), cell(n.scope), n.ms, n.live_before, n.live_after, n.peak_during,
                       n.workspace_bytes, n.predicted_live_after, n.flops, roles(n.input_roles),
                       roles(n.output_roles), n.bytes_moved);
  out.commit();
}

void write_activations_csv(const profile::Profile& p, const std::string& path) {
  OutFile out(path);
  out << kActivationsCsvHeader << "\n";
  for (const auto& v : p.values)
    if (v.role == ir::Role::activation)
      out << fmt::format("{},{},{},{},{},{},{:.6f},{},{}\n", cell(v.name), v.bytes, v.def, v.last_fwd, v.first_bwd,
                         v.last_bwd, v.idle_ms, int{v.random}, int{v.view});
  out.commit();
}

void write_trace(const profile::Profile& p, const std::string& path) {
  using nlohmann::json;
  json events = json::array();
  auto track = [](ir::Phase ph) {
    switch (ph) {
      case ir::Phase::forward:
      case ir::Phase::loss: return 1;
      case ir::Phase::backward:
      case ir::Phase::recompute: return 2;
      case ir::Phase::optimizer: return 3;
    }
    return 1;
  };
  const char* names[] = {"", "forward", "backward", "optimizer"};
  for (int t = 1; t <= 3; ++t)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", t}, {"args", {{"name", names[t]}}}});
  double ts = 0;  // microseconds
  for (const auto& n : p.nodes) {
    double dur = n.ms * 1000.0;
    events.push_back({{"name", n.op},
                      {"cat", ir::to_string(n.phase)},
                      {"ph", "X"},
                      {"ts", ts},
                      {"dur", dur},
                      {"pid", 1},
                      {"tid", track(n.phase)},
                      {"args",
                       {{"rank", n.rank},
                        {"value", n.name},
                        {"scope", n.scope},
                        {"live_after_bytes", n.live_after},
                        {"workspace_bytes", n.workspace_bytes},
                        {"flops", n.flops},
                        {"bytes_moved", n.bytes_moved}}}});
    json counters = json::object();
    for (int r = 0; r < ir::kNumRoles; ++r)
      counters[std::string(ir::to_string(static_cast<ir::Role>(r)))] = n.live_by_role[static_cast<size_t>(r)];
    events.push_back({{"name", "live memory (bytes)"}, {"ph", "C"}, {"ts", ts}, {"pid", 1}, {"args", counters}});
    ts += dur;
  }
  json trace{{"traceEvents", events},
             {"displayTimeUnit", "ms"},
             {"otherData", {{"model", p.model}, {"batch", p.batch}, {"device", p.device}}}};
  write_file(path, trace.dump() + "\n");
}

void write_profile_dir(const profile::Profile& p, const std::string& dir, const std::string& snapshot) {
  make_dirs(dir);
  profile::write_profile(p, dir + "/profile.json");
  write_profile_reports(p, dir, snapshot);
}

void write_profile_reports(const profile::Profile& p, const std::string& dir, const std::string& snapshot) {
  make_dirs(dir);
  write_nodes_csv(p, dir + "/nodes.csv");
  write_activations_csv(p, dir + "/activations.csv");
  write_trace(p, dir + "/trace.json");
  write_memory_snapshot(profile_memory(p), snapshot.empty() ? dir + "/" + kProfileSnapshot : snapshot);
  plot_memory_timeline(p, dir);
  plot_peak_breakdown(p, dir);
}

}  // namespace mutwo::report
