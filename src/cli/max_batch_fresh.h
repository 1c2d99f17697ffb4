// max-batch's fresh-process check, shared by its two routes: the search in
// this process (max_batch_cmd.cpp), and on CUDA the search in children
// (max_batch_children.cpp), where this process never opens the device, so that
// while an answer trains in its fresh child nothing of the searcher's (its
// CUDA context, the libraries' handles) holds memory the child needs. One
// try's row, its step down, its warning, the answer's summary and table cell.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/fresh_run.h"

namespace mutwo::cli {

// Fresh processes an answer is tried in, each one lower than the last.
inline constexpr int kFreshTries = 3;

// One fresh try of batch `b` under `cap` (max-batch's --memory): batch, fits,
// out_of_memory, peak_bytes, device_peak_bytes, seconds (and arena_over_cap with the arena).
nlohmann::json fresh_try(int64_t b, const FreshRun& r, int64_t cap, bool arena);

// The batch to try after `b` did not fit in a fresh process: lower by the
// overshoot at the step's bytes per sample (its peak over its batch: at least
// what one more sample adds), by 5% after an out-of-memory error (how far over
// is unknown); at least one batch. 0 or less: none.
int64_t fresh_step_down(int64_t b, const FreshRun& r, int64_t cap);

// "max-batch: mutwo: batch 12 fitted in this process but not in a fresh one (out of memory); trying 11 and below".
std::string fresh_warning(const std::string& planner, int64_t b, const FreshRun& r, int64_t cap, int64_t next, bool more);

// An answer's fresh_process: the last try's batch, fits and bytes, margin_bytes, seconds, and every try.
nlohmann::json fresh_summary(const nlohmann::json& tries, int64_t cap);

// The table's fresh-process cell: "fits, 12.0 KiB to spare", "skipped".
std::string fresh_cell(const nlohmann::json& f);

// The error where answers did not fit in a fresh process: each "PLANNER (fresh-process tries: [...])".
std::string unconfirmed_text(const std::vector<std::string>& planners);

// The planners of --planners, in order ("none,per-layer,mutwo").
std::vector<std::string> planner_list(const std::string& planners);

}  // namespace mutwo::cli
