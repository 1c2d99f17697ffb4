// The fresh-process check of an answer, shared by max-batch's two routes (the
// search in this process, max_batch_cmd.cpp, and on CUDA the search in
// children, max_batch_children.cpp, where this process never opens the
// device, so that while an answer trains in its fresh child nothing of the
// searcher's, its CUDA context and the libraries' handles, holds memory the
// child needs) and by many --memory's search over copies (many_memory.cpp).
// The check's loop, one try's row, its step down, the answer's summary and
// table cell.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/fresh_run.h"

namespace mutwo {
class Progress;
}

namespace mutwo::cli {

// Fresh processes an answer is tried in, each one lower than the last.
inline constexpr int kFreshTries = 3;

// What the check asks of its caller about a count n (a batch, a number of
// copies) that fitted in this process.
struct FreshCheck {
  int64_t cap = 0;             // the limit (--memory, in bytes) the fresh process's peak is held to
  bool arena = false;          // the fresh process trains from its arena (its exit 3: over the cap)
  const char* key = "batch";   // the count's name in the rows
  std::function<FreshRun(int64_t n)> train;        // trains n's step in a fresh process (run_fresh)
  std::function<std::string(int64_t n)> subject;   // names n in the warning: "max-batch: mutwo: batch 12"
  std::function<int64_t(int64_t next)> below;      // the largest count at or below next that fits here (0: none)
};
// Where it settled: the count (0: no lower one fits even in this process),
// whether it fitted in its fresh process (false: the last tried did not), and
// the fresh_process row (null where nothing was tried).
struct FreshAnswer {
  int64_t n = 0;
  bool fits = false;
  nlohmann::json row;
};
// Trains n in a fresh process. Where its measured peak passes the cap, or it
// runs out of memory, n steps down and is tried again, kFreshTries times in
// all: by the overshoot at the step's bytes per unit of n (its peak over n:
// at least what one more adds, so the step is not too far), by 5% after an
// out-of-memory error (how far over is unknown); at least one each time, to
// c.below's count; each miss warned on `progress`.
FreshAnswer confirm_fresh(int64_t n, const FreshCheck& c, Progress& progress);

// One fresh try of count `n` (under `key`) under `cap`: n, fits,
// out_of_memory, peak_bytes, device_peak_bytes, seconds (and arena_over_cap with the arena).
nlohmann::json fresh_try(int64_t n, const FreshRun& r, int64_t cap, bool arena, const char* key = "batch");

// An answer's fresh_process: the last try's count, fits and bytes, margin_bytes, seconds, and every try.
nlohmann::json fresh_summary(const nlohmann::json& tries, int64_t cap, const char* key = "batch");

// The table's fresh-process cell: "fits, 12.0 KiB to spare", "skipped".
std::string fresh_cell(const nlohmann::json& f);

// The error where answers did not fit in a fresh process: each "PLANNER (fresh-process tries: [...])".
std::string unconfirmed_text(const std::vector<std::string>& planners);

// The planners of --planners, in order ("none,per-layer,mutwo").
std::vector<std::string> planner_list(const std::string& planners);

}  // namespace mutwo::cli
