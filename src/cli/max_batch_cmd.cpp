// mutwo max-batch: the largest batch whose measured peak fits a memory limit,
// per planner: its flags, and the command that runs the search (in this
// process, max_batch_search.h; on CUDA in search children,
// max_batch_children.cpp) and prints the table of answers. With --json,
// stdout ends with one JSON object, on failure too.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/ending_in_json.h"
#include "cli/max_batch_fresh.h"
#include "cli/max_batch_search.h"
#include "support/error.h"
#include "support/progress.h"

namespace mutwo::cli {

using nlohmann::json;

void MaxBatchCommand::add_to(CLI::App& app) {
  swap.add_to(app);
  step.add_to(app, /*with_batch=*/false, /*with_graph=*/false);
  app.add_option("--memory", memory,
                 "what the process may hold, e.g. 8GiB, or `free`: what the card has free now (the default on CUDA)")
      ->check(kSizeOrFree);
  app.add_option("--planners", planners, "planners to compare (none = no checkpointing)")->capture_default_str();
  device.add_to(app);
  app.add_option("--limit", limit, "largest batch to try")->capture_default_str()->check(kPositive);
  app.add_option("--search", search,
                 "model: predict each answer from profiles at one or two batches, then confirm it with real runs; "
                 "full: doubling then bisection, a profile at every batch tried")
      ->capture_default_str()
      ->check(CLI::IsMember({"model", "full"}));
  app.add_option("--out", out, "directory for each answer's rewritten step, PLANNER.ir (train it with run --graph)");
  app.add_flag("--no-fresh-check", no_fresh_check,
               "report each answer as found in this process, without training it again in a fresh process");
  arena.add_to(app, "each batch tried and each answer's fresh process (run --arena)",
               "an answer fits where the arena, what falls back to the allocator and the context stay under --memory");
  output.add_to(app);
}

int MaxBatchCommand::run() const {
  json result{{"command", "max-batch"}, {"memory_bytes", nullptr}, {"model", step.model}, {"results", json::array()}};
  return ending_in_json(output.json, result, [&] { return find(result); });
}

// Fills `result`'s memory_bytes and, planner by planner, its results.
int MaxBatchCommand::find(nlohmann::json& result) const {
  // On CUDA the search runs in children, so that this process holds nothing on the card while an answer trains in
  // its fresh process (max_batch_children.cpp); a test asks for the same on the CPU.
  if (!no_fresh_check && (device.name.rfind("cuda", 0) == 0 || std::getenv("MUTWO_TEST_SEARCH_IN_CHILDREN")))
    return find_in_children(result);
  for (const std::string& planner : planner_list(planners)) check_planner(planner);  // before any batch is tried
  c10::Device dev = device.open();
  MUTWO_CHECK(!memory.empty() || dev.is_cuda(), "max-batch on the CPU needs --memory (e.g. --memory 2GiB)");
  const std::vector<std::string> names = planner_list(planners);
  const int64_t cap = device_memory_bytes(dev, memory.empty() ? "free" : memory);
  result["memory_bytes"] = cap;
  result["device_memory_bytes"] = device.memory_cap(dev);  // --device-memory in bytes (0: none)
  result["search"] = search;
  result["search_process"] = "this";
  const bool use_arena = arena.resolve(dev, /*bounded=*/true);  // --memory is the cap
  result["arena"] = use_arena;
  result["arena_from"] = arena.from();
  Progress progress("max-batch", {!output.quiet});
  MaxBatchSearch s(*this, dev, cap, use_arena, progress);
  s.predict(names);
  fmt::print("| planner | largest batch | measured peak | device peak | fresh process |\n|---|---|---|---|---|\n");
  // mutwo after per-layer and sqrt-n, whose answers are its floor; the rows then in --planners' order.
  std::vector<std::string> order = names;
  std::stable_partition(order.begin(), order.end(), [](const std::string& p) { return p != "mutwo"; });
  for (const std::string& planner : order) result["results"].push_back(s.answer(planner));
  json& rows = result["results"];
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t j = i; j < rows.size(); ++j)
      if (rows[j]["planner"] == names[i]) std::swap(rows[i], rows[j]);
  progress.done();
  progress.note(fmt::format("max-batch: done in {:.1f} s: {}", progress.elapsed_s(), s.spent()));
  // An answer that did not fit in a fresh process is no answer: exit 1, the rows printed first.
  const std::string unconfirmed = s.unconfirmed().empty() ? std::string() : unconfirmed_text(s.unconfirmed());
  // No planner fits batch 1: exit 3, as a budget no plan reaches, with what batch 1 needs.
  const std::string none_fits = s.none_fits();
  const std::string error = none_fits.empty() ? unconfirmed : none_fits;
  if (!error.empty()) result["error"] = error;
  if (output.json) std::cout << result.dump() << std::endl;
  if (error.empty()) return 0;
  fmt::print(stderr, "mutwo: {}\n", error);
  return none_fits.empty() ? 1 : kExitInfeasible;
}

}  // namespace mutwo::cli
