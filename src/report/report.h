// Reports from plain data (profiles, plans, measured points; never ATen): CSV
// tables, gnuplot plots (SVG and PNG, rendered from data files written next to
// them), Chrome traces and report.md. The commands only call these.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/plan_file.h"
#include "profile/profile.h"

namespace mutwo::report {

// nodes.csv: rank,name,op,phase,scope,ms,live_before_bytes,live_after_bytes,
//   peak_during_bytes,workspace_bytes,predicted_live_after_bytes,flops,input_roles,output_roles,bytes_moved
// activations.csv: name,bytes,def,last_fwd,first_bwd,last_bwd,idle_ms,random,view
// (roles within a cell are joined with '|').
extern const char* const kNodesCsvHeader;
extern const char* const kActivationsCsvHeader;
void write_nodes_csv(const profile::Profile& p, const std::string& path);
void write_activations_csv(const profile::Profile& p, const std::string& path);

// trace.json: one complete event per node on a forward, backward or optimizer
// track, and a counter of live memory by role (Perfetto, chrome://tracing).
void write_trace(const profile::Profile& p, const std::string& path);

// What `mutwo profile --out DIR` writes: profile.json and its reports.
void write_profile_dir(const profile::Profile& p, const std::string& dir, const std::string& snapshot = "");
// The reports of a profile alone (what `mutwo report --profile` writes again):
// nodes.csv, activations.csv, trace.json, the memory timeline and peak
// breakdown plots, and PyTorch's memory snapshot of the step, measured and
// predicted (report/snapshot.h), at `snapshot` (empty: DIR/kProfileSnapshot).
void write_profile_reports(const profile::Profile& p, const std::string& dir, const std::string& snapshot = "");
// The snapshots' file names in a command's --out folder: a profile's step
// (measured, then predicted), and a plan's (the unplanned step, then the plan's).
inline constexpr const char* kProfileSnapshot = "memory_snapshot.pickle";
inline constexpr const char* kPlanSnapshot = "memory_before_after.pickle";
// report.md of a saved plan (`mutwo report --plan`): its prediction and every
// activation with the planner's rank, recompute time, ratio, decision and why.
void write_plan_report(const profile::Profile& p, const plan::SavedPlan& f, const std::string& dir);

// Plots. Each writes NAME.dat and NAME.gp into `dir`, then renders NAME.svg and
// NAME.png with gnuplot. Returns false (after saying so once on stderr) when
// gnuplot is missing; the data files are written either way.
bool plot_memory_timeline(const profile::Profile& p, const std::string& dir);
bool plot_peak_breakdown(const profile::Profile& p, const std::string& dir);
// Both timelines (bytes at their high-water mark during every node), without
// and with the plan, on one plot with the budget: memory_timeline_before_after.svg.
void plot_before_after(const profile::Profile& before, const profile::Profile& after, int64_t budget,
                       const std::string& dir);
bool plot_batches(const std::vector<profile::Profile>& ps, const std::string& dir);  // peak_vs_batch, latency_vs_batch

// plan --sweep: tradeoff.csv and tradeoff.svg/.png, predicted peak against
// extra time, a line per planner, plans over their budget marked.
void write_tradeoff(const std::vector<plan::Plan>& plans, const profile::Profile& p, const std::string& dir);

// mutwo optimize's measurements as plain data.
struct StepMeasurement {
  bool measured = true;  // false: the step did not fit the device and was not run
  int64_t peak_bytes = 0, reserved_peak_bytes = 0;
  double step_ms = 0, last_loss = 0;  // step_ms: the median of the measured steps
  double step_ms_min = 0, step_ms_max = 0;  // their fastest and slowest
  int steps = 0;                            // how many were measured
};
struct OptimizeSummary {
  std::string what, device;  // "mlp batch 64", "cpu"
  plan::Plan plan;
  int64_t unplanned_peak = 0, dropped_bytes = 0;
  StepMeasurement baseline, planned;
  std::string check;    // passed, failed, skipped
  std::string command;  // the command line, to reproduce
};
// The before/after table optimize prints and report.md holds (step times
// with their spread over the measured steps).
std::string optimize_table(const OptimizeSummary& s);
// What optimize prints and report.md holds below the table: what lowered the
// peak (plan::decisions), the dropped and swapped activations by module and
// op (at most `listed` of each, the largest first; 0: all), and a note when
// the step times' spread is larger than the difference the table shows.
std::string optimize_details(const OptimizeSummary& s, const plan::PlanInput& in, size_t listed);
// DIR/report.md: the table, the before/after plot, the dropped activations by block, how to reproduce.
void write_optimize_report(const OptimizeSummary& s, const plan::PlanInput& in, const std::string& dir);

// mutwo sweep's measured points. `feasible`: whether the plan's predicted peak
// met its budget (none for the baseline, which has no plan).
struct SweepPoint {
  int64_t batch = 0;
  std::string variant;  // baseline, per-layer, <planner>
  int64_t budget_bytes = 0, peak_bytes = 0, predicted_peak_bytes = 0;
  double step_ms = 0;
  std::optional<bool> feasible;
};
struct Sweep {
  std::string model, device, planner, budget, command;
  std::vector<std::string> variants;  // in plotting order
  std::vector<SweepPoint> points;
};
extern const char* const kSweepCsvHeader;
// The Markdown table, one row per point, and the line saying which plans missed their budget.
std::string sweep_table(const Sweep& s);
std::string sweep_missed_line(const Sweep& s);
// sweep.csv, peak_vs_batch and time_vs_batch (missed points marked), report.md.
void write_sweep_dir(const Sweep& s, const std::string& dir);

// Plot colours: no colour is used twice within one plot. Series (lines of
// planners or variants) take series_color(0), (1), ...; roles have their own.
const char* series_color(size_t i);
// "pt N ps S" for series i: its own shape, each smaller than the one before,
// so that series drawn over each other (per-layer and sqrt-n often make the
// same plan) still show each marker.
std::string series_point(size_t i);
const char* role_color(ir::Role r);
extern const char* const kMissedColor;     // the ring around a point whose plan missed its budget
extern const char* const kBudgetColor;     // budget lines
extern const char* const kWorkspaceColor;  // workspace (beyond the live tensors)
double mib(int64_t bytes);

// Runs gnuplot on a script in `dir`; false if gnuplot is missing.
bool render(const std::string& dir, const std::string& script);

// Writes DIR/NAME.gp drawing `body` (gnuplot commands ending in a plot
// command, reading data files in `dir`) to NAME.svg and NAME.png of w x h
// pixels, and renders it; false if gnuplot is missing.
bool plot(const std::string& dir, const std::string& name, const std::string& body, int w = 1100, int h = 520);

}  // namespace mutwo::report
