// The `mutwo` command: the only place that reads argv. Every subcommand follows
// one convention: human-readable output by default, and with --json the last
// line of stdout is one JSON object (bytes in *_bytes keys, times in *_ms keys).
// Bad input exits with code 2 and one line on stderr. Each subcommand is a
// struct of cli/commands.h, in a file of its own (NAME_cmd.cpp); this file
// parses the command line, runs one of them, and turns errors into exit codes.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/pipeline.h"
#include "cli/ranks.h"
#include "runtime/memory.h"
#include "support/error.h"

namespace mutwo::cli {

namespace {

// Edits (insertions, deletions, substitutions) between a and b.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// A parse error as one line that says what to do: a flag the command does
// not have gets the nearest one it has ("did you mean --budget?"), and every
// error points at that command's --help.
std::string parse_error_line(CLI::App& app, int argc, char** argv, const CLI::ParseError& e) {
  CLI::App* sub = nullptr;
  for (CLI::App* s : app.get_subcommands({}))
    if (argc > 1 && s->get_name() == argv[1]) sub = s;
  if (!sub) return fmt::format("{}; see mutwo --help", e.what());
  const std::string help = fmt::format("see mutwo {} --help", sub->get_name());
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-' || std::isdigit(static_cast<unsigned char>(arg[1])) || arg == "--") continue;
    const std::string flag = arg.substr(0, arg.find('='));
    if (flag == "-h" || flag == "--help" || sub->get_option_no_throw(flag) != nullptr) continue;
    std::string nearest;
    size_t best = std::string::npos;
    for (const CLI::Option* o : sub->get_options())
      for (const std::string& name : o->get_lnames())
        if (const size_t d = edit_distance(flag, "--" + name); d < best) {
          best = d;
          nearest = "--" + name;
        }
    const bool close = !nearest.empty() && best <= std::max<size_t>(2, flag.size() / 3);
    return fmt::format("mutwo {} has no option {}{}; {}", sub->get_name(), flag,
                       close ? fmt::format(": did you mean {}?", nearest) : std::string(), help);
  }
  return fmt::format("{}; {}", e.what(), help);
}

int main_impl(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) command_line() += (i ? " " : "") + std::string(i ? argv[i] : "mutwo");
  for (int i = 1; i < argc; ++i) command_args().emplace_back(argv[i]);
  CLI::App app{"mutwo: fit a deep-learning training step into a GPU memory budget (the mu-TWO approach)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mutwo 0.1");
  RunCommand run;
  ShowCommand show;
  InfoCommand info;
  ProfileCommand profile;
  PlanCommand plan;
  ReportCommand report;
  OptimizeCommand optimize;
  SweepCommand sweep;
  MaxBatchCommand max_batch;
  TrainCommand train;
  ManyCommand many;
  run.add_to(*app.add_subcommand("run", "train a model for a few steps; print losses, peak memory, step time"));
  show.add_to(*app.add_subcommand("show", "print the training-step graph in the IR's text form"));
  info.add_to(*app.add_subcommand("info", "parameter count, node count and bytes by role of a model's step"));
  profile.add_to(*app.add_subcommand("profile", "measure every node of a training step; write profile.json, CSVs, plots, trace"));
  plan.add_to(*app.add_subcommand("plan", "choose activations to recompute so the step fits a memory budget"));
  report.add_to(*app.add_subcommand("report", "write a saved profile's tables and plots (and a plan's report.md) again; runs nothing"));
  optimize.add_to(*app.add_subcommand("optimize", "profile, plan, rewrite and train under a budget; measured"));
  sweep.add_to(*app.add_subcommand("sweep", "peak memory and step time against batch size, with and without checkpointing"));
  max_batch.add_to(*app.add_subcommand("max-batch", "the largest batch that fits a memory limit, per planner"));
  train.add_to(*app.add_subcommand("train", "train a decoder on a text file for epochs of batches, optionally under a "
                                            "memory budget; per epoch the training and held-out loss, tokens/s, peak"));
  many.add_to(*app.add_subcommand("many", "train N copies of a zoo model as one graph, copy i from seed S+i at its own "
                                          "learning rate, under one budget; per copy its losses"));
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  if (argc > 1 && argv[1][0] != '-' && std::find(names.begin(), names.end(), argv[1]) == names.end()) {
    fmt::print(stderr, "mutwo: error: unknown command '{}'; commands: {}\n", argv[1], fmt::join(names, ", "));
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "mutwo: error: {}\n", parse_error_line(app, argc, argv, e));
    return 2;
  }
  // A step read from a file (--graph) whose kernel refuses what the file
  // gave it (a class label out of range in its tensors, an argument its op
  // does not take) is the file's fault: exit 2 naming it. For a zoo model an
  // ATen error stays ours (exit 1).
  if (std::optional<runtime::Launch> launch = launch_from_env()) {
    std::string* device = app.got_subcommand("run")        ? &run.device.name
                          : app.got_subcommand("profile")  ? &profile.device.name
                          : app.got_subcommand("optimize") ? &optimize.device.name
                                                           : nullptr;
    MUTWO_CHECK(device, "mutwo {} runs in one process, but WORLD_SIZE is {}: under torchrun, launch run, profile or optimize",
                app.get_subcommands().front()->get_name(), launch->world_size);
    join_ranks(*launch, *device);
    profile.out = rank_dir(profile.out);
    optimize.out = rank_dir(optimize.out);
  }
  const std::string* graph_file = app.got_subcommand("run")        ? &run.step.graph
                                  : app.got_subcommand("profile")  ? &profile.step.graph
                                  : app.got_subcommand("optimize") ? &optimize.step.graph
                                                                   : nullptr;
  try {
    // The commands that run on several ranks: each leaves the group once every rank finished.
    if (app.got_subcommand("run") || app.got_subcommand("profile") || app.got_subcommand("optimize")) {
      int rc = app.got_subcommand("run") ? run.run() : app.got_subcommand("profile") ? profile.run() : optimize.run();
      leave_ranks();
      return rc;
    }
    if (app.got_subcommand("show")) return show.run();
    if (app.got_subcommand("info")) return info.run();
    if (app.got_subcommand("plan")) return plan.run();
    if (app.got_subcommand("report")) return report.run();
    if (app.got_subcommand("sweep")) return sweep.run();
    if (app.got_subcommand("max-batch")) return max_batch.run();
    if (app.got_subcommand("train")) return train.run();
    if (app.got_subcommand("many")) return many.run();
  } catch (const c10::Error& e) {
    if (!graph_file || graph_file->empty() || runtime::is_out_of_memory(e)) throw;
    std::string what = e.what_without_backtrace();
    what = what.substr(0, what.find('\n'));
    while (!what.empty() && (what.back() == '.' || what.back() == ' ')) what.pop_back();
    MUTWO_FAIL("--graph {}: a kernel refused the step: {}; check its tensors and its ops' arguments", *graph_file, what);
  }
  return 2;
}

}  // namespace
}  // namespace mutwo::cli

namespace {
// On several ranks a failed rank leaves at once: the group's teardown would
// wait for ranks that are not coming (torchrun stops the others).
int leave(int code) {
  if (code != 0 && mutwo::cli::ranks()) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);
  }
  return code;
}
int main_or_exit(int argc, char** argv);
}  // namespace

int main(int argc, char** argv) { return leave(main_or_exit(argc, argv)); }

namespace {
int main_or_exit(int argc, char** argv) {
#ifdef MUTWO_WITH_CUDA
  // CUDA's caching allocator grows segments in place rather than cutting
  // blocks out of fixed ones, so what it reserves follows what is allocated
  // (a block handed out whole, larger than asked for, no longer counts) and a
  // budget of allocated bytes holds on a card of that size. The user's own
  // PYTORCH_CUDA_ALLOC_CONF wins.
  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);
#endif
  try {
    return mutwo::cli::main_impl(argc, argv);
  } catch (const mutwo::UserError& e) {
    fmt::print(stderr, "{}\n", mutwo::user_error_line(e));
    return 2;
  } catch (const c10::Error& e) {
    if (mutwo::runtime::is_out_of_memory(e)) {
      std::string what = e.what_without_backtrace();
      fmt::print(stderr, "{}{}; plan the step under a budget (mutwo optimize --budget) or lower the batch\n",
                 mutwo::cli::kOutOfMemoryLine, what.substr(0, what.find('\n')));
      return 1;
    }
    fmt::print(stderr, "mutwo: ATen error: {}\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mutwo: {}\n", e.what());
    return 1;
  }
}
}  // namespace
