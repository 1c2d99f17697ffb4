// max-batch's search in this process (max_batch_cmd.cpp runs it; on CUDA its
// search children do, max_batch_children.cpp): for each planner in turn, the
// largest batch whose rewritten step, measured, fits --memory. With --search
// model it profiles the step at one or two batches (profile/batch_model.h),
// predicts every planner's answer from that model without running anything,
// then confirms each answer and the batch above it with real runs; with
// --search full every batch tried is profiled for real. Each answer is then
// trained in a fresh process (cli/fresh_run.h) and stepped down where it does
// not fit there, unless --no-fresh-check.
#pragma once

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/pipeline.h"
#include "ir/graph.h"
#include "profile/batch_model.h"

namespace mutwo::cli {

// One search, for the planners of one max-batch command: predict() once, then
// answer() per planner (per-layer and sqrt-n before mutwo, whose floor they are).
class MaxBatchSearch {
 public:
  // `cap`: --memory in bytes; `arena`: every step measured, and every answer trained fresh, from its arena.
  MaxBatchSearch(const MaxBatchCommand& c, const c10::Device& dev, int64_t cap, bool arena, Progress& progress)
      : c_(c), dev_(dev), cap_(cap), arena_(arena), progress_(progress), model_(dev.str()) {}

  // --search model: profiles at one or two batches, then each planner's predicted answer.
  void predict(const std::vector<std::string>& planners);
  // One planner's answer, confirmed by real runs (and in a fresh process):
  // its table row printed, its JSON row returned.
  nlohmann::json answer(const std::string& planner);
  // Where the time went, for the closing line.
  std::string spent() const;
  // Planners whose answer did not fit in a fresh process, with what happened.
  const std::vector<std::string>& unconfirmed() const { return unconfirmed_; }
  // Where no planner fits batch 1: the least it needs (under the planner
  // needing least), as one line; else empty.
  std::string none_fits() const;

 private:
  // A real run of one planner at one batch: planned, rewritten, measured.
  struct Fit {
    bool fits = false;
    bool measured = false;              // false: the plan was over budget (or every attempt ran out of memory)
    int64_t peak = 0, device_peak = 0;  // measured allocated and device bytes, of the last attempt
    std::string step;                   // the rewritten step, as IR text (--out)
  };
  // Where the search's time went, for the closing line.
  struct Spent {
    double profile_s = 0, plan_s = 0, run_s = 0, fresh_s = 0;
    int profiles = 0, plans = 0, runs = 0, fresh = 0;
  };
  // What batch 1 needs where it does not fit: the device bytes of the lowest
  // peak a planner reaches there, and of them the step's persistent state.
  struct Need {
    int64_t bytes = 0, persistent = 0;
    std::string text() const;
  };
  // An answer trained in a fresh process: the batch it settled on, whether it
  // fitted there, and its JSON (`fresh_process`).
  struct Confirmed {
    int64_t batch = 0;
    bool fits = false;
    nlohmann::json row;
  };

  bool full() const { return c_.search == "full"; }
  ProfilingOptions profiling(int64_t b) const;
  // The planning request of every plan: the swap flags, progress unless --quiet; each run sets planner and budget.
  plan::PlanOptions request() const;
  // The rewritten step measured (from its arena under --arena): its figures,
  // or, where the arena with the persistent state passes the cap, by how much.
  Measured measure_step(const ir::Graph& g, int64_t& arena_over);
  const ir::Graph& step_at(int64_t b);
  // The step at b with the model's profile (predictions, and the plans of
  // real runs for planners that read no node times: the bytes are the step's own).
  const PlannedOnDevice& modelled(int64_t b);
  const PlannedOnDevice& profiled(int64_t b);  // the step at b profiled for real (real runs), shared by the planners
  bool add_point(int64_t b);
  int64_t guess(const std::string& planner);
  bool predicted_fits(const std::string& planner, int64_t b);
  const Fit& run(const std::string& planner, int64_t b);
  Fit try_run(const std::string& planner, int64_t b);
  Confirmed confirm_fresh(const std::string& planner, int64_t b);
  Need batch_one_needs(const std::string& planner);
  std::pair<const Confirmed*, std::string> floor_of(const std::string& planner) const;
  void note_answer(const std::string& planner, int64_t searched, const std::string& name, const Confirmed& fresh);

  const MaxBatchCommand& c_;
  const c10::Device dev_;
  const int64_t cap_;
  const bool arena_;  // every step measured, and every answer trained fresh, from its arena
  Progress& progress_;
  profile::BatchModel model_;
  std::vector<int64_t> model_batches_;
  std::map<std::string, int64_t> predicted_;
  std::map<int64_t, ir::Graph> steps_;
  std::map<int64_t, PlannedOnDevice> modelled_;
  std::map<int64_t, PlannedOnDevice> profiled_;
  std::map<std::pair<std::string, int64_t>, Fit> runs_;
  std::map<std::string, Measured> measured_;  // by the rewritten step's text: planners that make the same step share its run
  nlohmann::json tried_;  // the current planner's batches tried for real, in order: batch, fits, measured peak (null: the plan refused it)
  Spent spent_;
  std::vector<std::string> unconfirmed_;
  std::map<std::string, Need> short_;  // the planners that fit no batch, by what batch 1 needs
  std::map<std::string, Confirmed> answered_;  // each planner's answer, as confirmed (per-layer's and sqrt-n's: mutwo's floor)
};

}  // namespace mutwo::cli
