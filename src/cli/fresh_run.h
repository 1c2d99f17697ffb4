// A rewritten step trained in a fresh process: max-batch's (and many --memory's) last word on an
// answer. The step is written as IR text and trained by this same binary as a
// child, `mutwo run --graph STEP --json`, on the same device, cap and seed;
// its JSON line is read back. A process that measured a step once is not a
// fresh one: what it loaded, cached and fragmented stays with it.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/common.h"

namespace mutwo::cli {

// Steps the child trains: as many as max-batch measures in process (1 warm-up,
// 2 measured), every one of them under the limit.
inline constexpr int kFreshRunSteps = 3;

// What the child measured.
struct FreshRun {
  bool out_of_memory = false;   // it ran out of memory (no peak measured)
  bool arena_over_cap = false;  // run --arena refused: its arena and the persistent state pass the cap (no peak)
  int64_t peak_bytes = 0;      // allocated, the most over its steps
  int64_t device_peak_bytes = 0;  // reserved + context and libraries
  double seconds = 0;          // the child's wall time, start-up included
  bool measured() const { return !out_of_memory && !arena_over_cap; }
};

// How the child runs: under the parent's device options (`opened`: the device
// they opened), and with `arena` serving its step from an arena (run --arena).
struct FreshOptions {
  const DeviceOptions& device;
  const c10::Device& opened;
  bool arena = false;
  // The --device-memory cap in bytes, where this process has not opened the
  // device (max-batch searching in children): -1, device.memory_cap(opened).
  int64_t device_memory_bytes = -1;
  // The command whose check it is, for its failure ("max-batch: the
  // fresh-process check of ... failed"), and its flag that skips the check (none: null).
  const char* command = "max-batch";
  const char* skip_flag = "--no-fresh-check";
};

// The child's command line for `graph_path`: `run --graph`, --device, the cap
// the parent runs under in bytes (none without --device-memory), --seed,
// --steps, --json, and --arena where asked (--no-arena on CUDA where not). argv[0] is `exe`.
std::vector<std::string> fresh_run_argv(const std::string& exe, const std::string& graph_path, const FreshOptions& o);

// Trains `step_text` (IR) in a child process; `what` names it in messages
// ("per-layer at batch 12"). The step goes to a file in the temporary folder,
// removed when the child measured it or ran out of memory. A child that fails
// otherwise (an error, a signal, output without its JSON line) throws an
// error naming that file and the command that re-runs it. The executable is
// this process's own (/proc/self/exe); tests put another in its place with
// MUTWO_TEST_FRESH_EXE (a wrapper that runs mutwo and edits what it says).
FreshRun run_fresh(const std::string& step_text, const std::string& what, const FreshOptions& o);

// Runs `argv` (argv[0] an executable's path) as a child, its stdout into the
// file `out`, its stderr passed on; its exit code, or -signal. This process's
// own executable: /proc/self/exe.
int run_child(const std::vector<std::string>& argv, const std::string& out);
std::string this_executable();

}  // namespace mutwo::cli
