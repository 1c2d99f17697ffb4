// Subcommands that live in their own files (main.cpp holds run, show, info).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli/common.h"

namespace mutwo::cli {

// mutwo profile: phase 1, the graph profiler.
struct ProfileCommand {
  StepOptions step;
  std::string batches;  // "8,16,32" instead of --batch
  std::string device = "cpu";
  int iters = 3;
  int warmup = 1;
  uint64_t seed = 0;
  std::string out;
  bool json_out = false;
  bool quiet = false;

  void add_to(CLI::App& app);
  int run() const;
};

}  // namespace mutwo::cli
