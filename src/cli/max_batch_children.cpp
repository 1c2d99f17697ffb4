// mutwo max-batch on CUDA: the search in child processes, the fresh-process
// check here. A process that searched holds its CUDA context and the
// libraries' handles as long as it lives, memory its fresh child then lacks
// (on a shared card its answers ran out of memory in the child, and cuBLAS
// could not make its handle, yet trained alone in a fresh process). So this
// process never opens the device: a child, `max-batch ... --no-fresh-check
// --out DIR --json`, searches every planner and exits; each answer then trains
// in a fresh process while nothing else of mutwo's is on the card; an answer
// that does not fit there is searched again in a child under --limit of the
// batch below, as the search in one process steps down (max_batch_fresh.h).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/fresh_run.h"
#include "cli/max_batch_fresh.h"
#include "cli/pipeline.h"
#include "support/error.h"
#include "support/files.h"
#include "support/progress.h"
#include "support/units.h"

namespace mutwo::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The user's max-batch arguments less those each search child is given anew.
std::vector<std::string> kept_arguments() {
  const std::vector<std::string> valued = {"--out", "--planners", "--limit", "--memory", "--device-memory"};
  const std::vector<std::string> flags = {"--json", "--no-fresh-check"};
  std::vector<std::string> kept;
  const std::vector<std::string>& args = command_args();
  for (size_t i = 1; i < args.size(); ++i) {  // args[0]: max-batch
    const std::string name = args[i].substr(0, args[i].find('='));
    const bool has_value = std::find(valued.begin(), valued.end(), name) != valued.end();
    if (has_value && name == args[i]) ++i;  // "--out DIR": its value too
    if (has_value || std::find(flags.begin(), flags.end(), name) != flags.end()) continue;
    kept.push_back(args[i]);
  }
  return kept;
}

// One search child: its JSON line and exit code.
struct Searched {
  int code = 0;
  json j;
};

Searched search_child(const std::string& planners, int64_t limit, const std::string& memory,
                      const std::string& device_memory, const std::string& dir) {
  std::vector<std::string> argv{this_executable(), "max-batch"};
  for (const std::string& a : kept_arguments()) argv.push_back(a);
  for (std::string a : {std::string("--planners"), planners, std::string("--limit"), std::to_string(limit),
                        std::string("--no-fresh-check"), std::string("--json"), std::string("--out"), dir})
    argv.push_back(std::move(a));
  if (!memory.empty()) argv.insert(argv.end(), {"--memory", memory});
  if (!device_memory.empty()) argv.insert(argv.end(), {"--device-memory", device_memory});
  const std::string out = dir + ".stdout";
  Searched s;
  s.code = run_child(argv, out);
  std::string text = read_file(out), last;
  fs::remove(out);
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    if (text.compare(at, 1, "{") == 0) last = text.substr(at, end - at);
    at = end + 1;
  }
  s.j = json::parse(last, nullptr, /*allow_exceptions=*/false);
  MUTWO_CHECK(s.j.is_object() || s.code != 0, "max-batch: its search child printed no JSON line; re-run without "
              "the fresh-process check to see why: mutwo {} --no-fresh-check", fmt::join(command_args(), " "));
  return s;
}

}  // namespace

// Trains `row`'s answer in fresh processes, searched again below where it does not fit: row's fresh_process.
void MaxBatchCommand::confirm_in_children(json& row, const Children& c, Progress& progress) const {
  const std::string planner = row["planner"];
  FreshCheck check{c.cap, c.arena};
  check.train = [&](int64_t b) {
    return run_fresh(read_file(row["step"]), fmt::format("{} at batch {}", planner, b),
                     {device, c.device, c.arena, c.device_memory});
  };
  check.subject = [&](int64_t b) { return fmt::format("max-batch: {}: batch {}", planner, b); };
  int attempt = 0;
  check.below = [&](int64_t next) -> int64_t {
    const Searched s = search_child(planner, next, std::to_string(c.cap),
                                    c.device_memory > 0 ? std::to_string(c.device_memory) : "",
                                    fmt::format("{}/{}-{}", c.dir, planner, attempt++));
    json again = s.j.is_object() && !s.j["results"].empty() ? s.j["results"][0] : json::object();
    if (again.value("max_batch", int64_t{0}) == 0) return 0;  // no lower batch fits even in a searching process
    // The answer as the later search found it; the first search's answer, and every batch either ran.
    for (const char* key : {"searched_batch", "predicted_batch", "above_batch", "above_fits", "monotone"})
      again[key] = row[key];
    for (const json& run : row["runs"])
      if (std::none_of(again["runs"].begin(), again["runs"].end(), [&](const json& x) { return x["batch"] == run["batch"]; }))
        again["runs"].push_back(run);
    row = again;
    return row["max_batch"].get<int64_t>();
  };
  const FreshAnswer a = confirm_fresh(row["max_batch"].get<int64_t>(), check, progress);
  if (a.n == 0) row["max_batch"] = 0;
  row["fresh_process"] = a.row;
}

// The rows once confirmed: mutwo's floor, the table, the steps to --out, the JSON line and the exit.
int MaxBatchCommand::report_children(json& result, const Children& c, Progress& progress) const {
  json& rows = result["results"];
  auto confirmed = [](const json& r) {
    return r["max_batch"].get<int64_t>() > 0 && r["fresh_process"].is_object() && r["fresh_process"]["fits"].get<bool>()
               ? r["max_batch"].get<int64_t>() : int64_t{0};
  };
  for (json& m : rows) {
    if (m["planner"] != "mutwo") continue;
    m["own_max_batch"] = confirmed(m);
    for (const json& peer : rows)  // as plan_mutwo takes per-layer's or sqrt-n's plan where it is better
      if ((peer["planner"] == "per-layer" || peer["planner"] == "sqrt-n") && confirmed(peer) > confirmed(m)) {
        progress.warn(fmt::format("max-batch: mutwo: its own plans reach batch {}, {}'s {}: the answer is {}'s plan",
                                  m["own_max_batch"].get<int64_t>(), peer["planner"].get<std::string>(),
                                  confirmed(peer), peer["planner"].get<std::string>()));
        for (const char* key : {"max_batch", "peak_bytes", "device_peak_bytes", "fresh_process", "step"})
          m[key] = peer.value(key, json());
        m["answer_from"] = peer["planner"];
      }
  }
  progress.done();
  fmt::print("| planner | largest batch | measured peak | device peak | fresh process |\n|---|---|---|---|---|\n");
  std::vector<std::string> unconfirmed;
  for (json& r : rows) {
    const std::string planner = r["planner"], from = r.value("answer_from", planner);
    const int64_t b = r["max_batch"];
    if (b > 0)
      fmt::print("| {} | {} | {} | {} | {} |\n", from == planner ? planner : fmt::format("{} ({}'s plan)", planner, from),
                 b, format_bytes(r["peak_bytes"].get<int64_t>()), format_bytes(r["device_peak_bytes"].get<int64_t>()),
                 fresh_cell(r["fresh_process"]));
    else
      fmt::print("| {} | 0 | - | - | no batch fits in a fresh process |\n", planner);
    if (confirmed(r) == 0)
      unconfirmed.push_back(fmt::format("{} (fresh-process tries: {})", planner,
                                        r["fresh_process"].is_object() ? r["fresh_process"]["tries"].dump() : "[]"));
    if (!out.empty() && r.contains("step") && r["step"].is_string()) {
      make_dirs(out);
      const std::string path = out + "/" + planner + ".ir";
      write_file(path, read_file(r["step"]));
      r["step"] = path;
    } else {
      r.erase("step");
    }
  }
  fs::remove_all(c.dir);
  const std::string error = unconfirmed.empty() ? std::string() : unconfirmed_text(unconfirmed);
  if (!error.empty()) result["error"] = error;
  if (output.json) std::cout << result.dump() << std::endl;
  if (error.empty()) return 0;
  fmt::print(stderr, "mutwo: {}\n", error);
  return 1;
}

int MaxBatchCommand::find_in_children(json& result) const {
  const std::vector<std::string> names = planner_list(planners);
  for (const std::string& planner : names) check_planner(planner);  // before any child
  Children c{parse_device(device.name)};  // not opened: this process makes no CUDA context
  c.dir = (fs::temp_directory_path() / fmt::format("mutwo-max-batch-{}", getpid())).string();
  make_dirs(c.dir);
  Progress progress("max-batch", {!output.quiet});
  const Searched first = search_child(planners, limit, memory, device.memory, c.dir + "/all");
  if (first.j.is_object()) result.update(first.j);
  result["search_process"] = "children";
  if (first.code != 0) {  // it said why on stderr (no batch 1 fits: 3)
    if (output.json) std::cout << result.dump() << std::endl;
    fs::remove_all(c.dir);
    return first.code;
  }
  c.cap = result["memory_bytes"];
  c.device_memory = result.value("device_memory_bytes", int64_t{0});
  c.arena = result["arena"];
  json& rows = result["results"];
  try {
    for (json& row : rows)  // mutwo's last: per-layer's and sqrt-n's answers are its floor
      if (row["planner"] != "mutwo") confirm_in_children(row, c, progress);
    for (json& row : rows)
      if (row["planner"] == "mutwo") confirm_in_children(row, c, progress);
  } catch (const std::exception&) {
    result["results"] = json::array();  // a failed check: no row stands, as in the search in one process
    fs::remove_all(c.dir);
    throw;
  }
  return report_children(result, c, progress);
}

}  // namespace mutwo::cli
