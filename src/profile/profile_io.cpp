// profile.json: the Profile's versioned JSON form.
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "profile/profile.h"
#include "support/error.h"
#include "support/json_input.h"
#include "support/files.h"

namespace mutwo::profile {

std::string Profile::label() const {
  return batch > 0 ? fmt::format("{} batch {} on {}", model, batch, device) : fmt::format("{} on {}", model, device);
}

using nlohmann::json;

int32_t Profile::first_backward_rank() const {
  for (const auto& n : nodes)
    if (ir::is_backward(n.phase)) return n.rank;
  return -1;
}

namespace {

std::vector<std::string> role_names(const std::vector<ir::Role>& roles) {
  std::vector<std::string> out;
  for (ir::Role r : roles) out.emplace_back(ir::to_string(r));
  return out;
}

ir::Role role_of(const std::string& s, const std::string& where) {
  auto r = ir::parse_role(s);
  MUTWO_CHECK(r.has_value(), "{}: unknown role '{}'", where, s);
  return *r;
}

std::vector<ir::Role> roles_of(const json& j, const char* key, const std::string& where) {
  std::vector<ir::Role> out;
  for (const auto& s : json_field<std::vector<std::string>>(j, key, where)) out.push_back(role_of(s, where));
  return out;
}

}  // namespace

std::string to_json_text(const Profile& p) {
  json nodes = json::array();
  for (const auto& n : p.nodes)
    nodes.push_back({{"rank", n.rank},
                     {"name", n.name},
                     {"op", n.op},
                     {"phase", ir::to_string(n.phase)},
                     {"scope", n.scope},
                     {"ms", n.ms},
                     {"live_before_bytes", n.live_before},
                     {"live_after_bytes", n.live_after},
                     {"peak_during_bytes", n.peak_during},
                     {"workspace_bytes", n.workspace_bytes},
                     {"predicted_live_after_bytes", n.predicted_live_after},
                     {"live_by_role_bytes", n.live_by_role},
                     {"flops", n.flops},
                     {"bytes_moved", n.bytes_moved},
                     {"input_roles", role_names(n.input_roles)},
                     {"output_roles", role_names(n.output_roles)}});
  json values = json::array();
  for (const auto& v : p.values)
    values.push_back({{"name", v.name},
                      {"bytes", v.bytes},
                      {"role", ir::to_string(v.role)},
                      {"def", v.def},
                      {"last_fwd", v.last_fwd},
                      {"first_bwd", v.first_bwd},
                      {"last_bwd", v.last_bwd},
                      {"idle_ms", v.idle_ms},
                      {"random", v.random},
                      {"view", v.view}});
  json by_role = json::object();
  for (int r = 0; r < ir::kNumRoles; ++r)
    by_role[std::string(ir::to_string(static_cast<ir::Role>(r)))] = p.peak_by_role[static_cast<size_t>(r)];
  json j{{"format", "mutwo.profile"},
         {"version", p.version},
         {"model", p.model},
         {"batch", p.batch},
         {"device", p.device},
         {"iters", p.iters},
         {"warmup", p.warmup},
         {"persistent_bytes", p.persistent_bytes},
         {"peak_bytes", p.peak_bytes},
         {"peak_node", p.peak_node},
         {"peak_by_role_bytes", by_role},
         {"peak_workspace_bytes", p.peak_workspace_bytes},
         {"device_peak_bytes", p.device_peak_bytes},
         {"h2d_gbps", p.h2d_gbps},
         {"d2h_gbps", p.d2h_gbps},
         {"step_ms", p.step_ms},
         {"step_ms_min", p.step_ms_min},
         {"step_ms_max", p.step_ms_max},
         {"node_ms_sum", p.node_ms_sum},
         {"nodes", nodes},
         {"values", values},
         {"graph", p.graph_text}};
  return j.dump(1);
}

Profile from_json_text(const std::string& text, const std::string& source) {
  const json j = parse_json_input(text, source);
  MUTWO_CHECK(json_tag_is(j, "format", "mutwo.profile"),
              "{}: not a mutwo profile (no \"format\": \"mutwo.profile\")", source);
  Profile p;
  p.version = json_field<int>(j, "version", source);
  MUTWO_CHECK(p.version == kProfileVersion,
              "{}: profile format version {} is not supported (this mutwo reads version {}); rerun mutwo profile",
              source, p.version, kProfileVersion);
  p.model = json_field<std::string>(j, "model", source);
  p.batch = json_size(j, "batch", source);
  p.device = json_field<std::string>(j, "device", source);
  p.iters = json_non_negative<int>(j, "iters", source);
  p.warmup = json_non_negative<int>(j, "warmup", source);
  p.persistent_bytes = json_size(j, "persistent_bytes", source);
  p.peak_bytes = json_size(j, "peak_bytes", source);
  p.peak_node = json_field<int32_t>(j, "peak_node", source);
  p.peak_workspace_bytes = json_size(j, "peak_workspace_bytes", source);
  if (j.contains("device_peak_bytes")) p.device_peak_bytes = json_size(j, "device_peak_bytes", source);
  // Profiles from before swapping have no bandwidth: they plan without it.
  for (auto [key, field] : {std::pair{"h2d_gbps", &p.h2d_gbps}, std::pair{"d2h_gbps", &p.d2h_gbps}}) {
    if (!j.contains(key)) continue;
    *field = json_non_negative<double>(j, key, source);
    MUTWO_CHECK(*field <= 1e6, "{}: field '{}' is {} GB/s, more than any bus", source, key, *field);
  }
  p.step_ms = json_ms(j, "step_ms", source);
  if (j.contains("step_ms_min")) p.step_ms_min = json_ms(j, "step_ms_min", source);  // absent before they were kept
  if (j.contains("step_ms_max")) p.step_ms_max = json_ms(j, "step_ms_max", source);
  p.node_ms_sum = json_ms(j, "node_ms_sum", source);
  p.graph_text = json_field<std::string>(j, "graph", source);
  const json by_role = json_field<json>(j, "peak_by_role_bytes", source);
  for (int r = 0; r < ir::kNumRoles; ++r)
    p.peak_by_role[static_cast<size_t>(r)] =
        json_size(by_role, std::string(ir::to_string(static_cast<ir::Role>(r))).c_str(), source + " peak_by_role_bytes");
  const json& nodes = json_field<json>(j, "nodes", source);
  const json& values = json_field<json>(j, "values", source);
  MUTWO_CHECK(nodes.is_array() && values.is_array(), "{}: fields 'nodes' and 'values' must be lists", source);
  int i = 0;
  for (const json& n : nodes) {
    std::string where = fmt::format("{} nodes[{}]", source, i++);
    NodeRecord r;
    r.rank = json_field<int32_t>(n, "rank", where);
    MUTWO_CHECK(r.rank == i - 1, "{}: rank {} where {} was expected (node records in execution order)", where, r.rank, i - 1);
    r.name = json_field<std::string>(n, "name", where);
    r.op = json_field<std::string>(n, "op", where);
    auto ph = ir::parse_phase(json_field<std::string>(n, "phase", where));
    MUTWO_CHECK(ph.has_value(), "{}: unknown phase", where);
    r.phase = *ph;
    r.scope = json_field<std::string>(n, "scope", where);
    r.ms = json_ms(n, "ms", where);
    r.live_before = json_size(n, "live_before_bytes", where);
    r.live_after = json_size(n, "live_after_bytes", where);
    r.peak_during = json_size(n, "peak_during_bytes", where);
    r.workspace_bytes = json_field<int64_t>(n, "workspace_bytes", where);  // measured: may be negative
    MUTWO_CHECK(r.workspace_bytes >= -kMaxBytes && r.workspace_bytes <= kMaxBytes, "{}: field 'workspace_bytes' is {}, "
                "more than 1 PiB", where, r.workspace_bytes);
    r.predicted_live_after = json_size(n, "predicted_live_after_bytes", where);
    const json& by_role = json_field<json>(n, "live_by_role_bytes", where);
    MUTWO_CHECK(by_role.is_array() && by_role.size() == r.live_by_role.size(), "{}: live_by_role_bytes needs {} entries",
                where, r.live_by_role.size());
    for (size_t k = 0; k < by_role.size(); ++k)
      r.live_by_role[k] = json_size(json{{"live_by_role_bytes", by_role[k]}}, "live_by_role_bytes", where);
    r.flops = json_non_negative<double>(n, "flops", where);
    if (n.contains("bytes_moved")) r.bytes_moved = json_size(n, "bytes_moved", where);  // absent before 2026-11-26
    r.input_roles = roles_of(n, "input_roles", where);
    r.output_roles = roles_of(n, "output_roles", where);
    p.nodes.push_back(std::move(r));
  }
  i = 0;
  for (const json& v : values) {
    std::string where = fmt::format("{} values[{}]", source, i++);
    ValueRecord r;
    r.name = json_field<std::string>(v, "name", where);
    r.bytes = json_size(v, "bytes", where);
    r.role = role_of(json_field<std::string>(v, "role", where), where);
    r.def = json_field<int32_t>(v, "def", where);
    r.last_fwd = json_field<int32_t>(v, "last_fwd", where);
    r.first_bwd = json_field<int32_t>(v, "first_bwd", where);
    r.last_bwd = json_field<int32_t>(v, "last_bwd", where);
    r.idle_ms = json_ms(v, "idle_ms", where);
    r.random = json_field<bool>(v, "random", where);
    r.view = json_field<bool>(v, "view", where);
    p.values.push_back(std::move(r));
  }
  MUTWO_CHECK(p.peak_node >= -1 && p.peak_node < static_cast<int32_t>(p.nodes.size()),
              "{}: peak_node {} is not a node", source, p.peak_node);
  // Ranks a value record names must be nodes (the planners index by them).
  const auto n_nodes = static_cast<int32_t>(p.nodes.size());
  for (size_t k = 0; k < p.values.size(); ++k)
    for (int32_t rank : {p.values[k].def, p.values[k].last_fwd, p.values[k].first_bwd, p.values[k].last_bwd})
      MUTWO_CHECK(rank >= -1 && rank < n_nodes, "{} values[{}]: rank {} is not a node (the profile has {})", source, k, rank,
                  n_nodes);
  return p;
}

void write_profile(const Profile& p, const std::string& path) {
  write_file(path, to_json_text(p) + "\n");
}

Profile read_profile(const std::string& path) {
  MUTWO_CHECK(std::filesystem::exists(path), "cannot read profile {}: no such file (write one with mutwo profile --out DIR)",
              path);
  return from_json_text(read_file(path), path);
}

}  // namespace mutwo::profile
