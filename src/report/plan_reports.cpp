// Reports of plans: optimize's before/after table and report.md, plan
// --sweep's trade-off plot, and the report.md that `mutwo report --plan`
// writes from a saved plan.json (the planner's reasoning, candidate by candidate).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "report/report.h"
#include "support/files.h"
#include "support/units.h"
#include "plan/blocks.h"

namespace mutwo::report {

namespace {

std::string pct(double a, double b) { return b > 0 ? fmt::format("{:+.1f}%", 100.0 * (a - b) / b) : "n/a"; }

// | block | activations | bytes |: the dropped activations grouped by the
// module block (plan::block_of) of the module that makes each.
std::string dropped_by_block(const std::vector<plan::ActivationRecord>& records) {
  std::map<std::string, std::pair<int, int64_t>> by_block;
  for (const plan::ActivationRecord& a : records) {
    if (!a.recomputed()) continue;
    std::string b = plan::block_of(a.module.empty() ? a.name : a.module);  // an old plan's: the name (zoo graphs)
    auto& e = by_block[b.empty() ? "(outside blocks)" : b];
    e.first += 1;
    e.second += a.bytes;
  }
  std::string md = "| block | activations | bytes |\n|---|---|---|\n";
  for (const auto& [block, e] : by_block) md += fmt::format("| {} | {} | {} |\n", block, e.first, format_bytes(e.second));
  return md;
}

// "- text: peak X lower (Y without it)", one line per decision; a line saying there are none.
std::string decision_lines(const std::vector<plan::Decision>& ds) {
  if (ds.empty()) return "- nothing: the plan is the unplanned step\n";
  std::string out;
  for (const plan::Decision& d : ds) out += "- " + plan::decision_line(d) + "\n";
  return out;
}

// "- layer1.0.conv1: convolution (`convolution_1`, 1.0 MiB)": the records with
// `decision`, largest first, at most `listed` (0: all), then how many more.
std::string activation_lines(const std::vector<plan::ActivationRecord>& records, const std::string& decision,
                             size_t listed) {
  std::vector<const plan::ActivationRecord*> rows;
  for (const auto& a : records)
    if (a.decision == decision) rows.push_back(&a);
  std::stable_sort(rows.begin(), rows.end(), [](const auto* a, const auto* b) { return a->bytes > b->bytes; });
  std::string out;
  const size_t shown = listed == 0 ? rows.size() : std::min(listed, rows.size());
  for (size_t i = 0; i < shown; ++i)
    out += fmt::format("- {} (`{}`, {})\n", rows[i]->label(), rows[i]->name, format_bytes(rows[i]->bytes));
  if (shown < rows.size()) out += fmt::format("- and {} more (plan.csv lists them all)\n", rows.size() - shown);
  return out;
}

// When the measured steps' spread is wider than the difference the table
// shows between baseline and plan, a sentence saying so; else empty.
std::string spread_note(const StepMeasurement& base, const StepMeasurement& planned) {
  if (!base.measured || base.steps < 2 || planned.steps < 2) return {};
  const double spread = std::max(base.step_ms_max - base.step_ms_min, planned.step_ms_max - planned.step_ms_min);
  const double difference = std::abs(planned.step_ms - base.step_ms);
  if (spread <= difference) return {};
  return fmt::format("Note: the step times vary by up to {:.2f} ms over the {} and {} measured steps, more than the "
                     "{:.2f} ms between baseline and plan: the extra time shown is within that noise (the predicted "
                     "extra time is the plan's own cost).\n",
                     spread, base.steps, planned.steps, difference);
}

std::string ms_range(const StepMeasurement& m) {
  return m.steps > 1 ? fmt::format("{:.1f} to {:.1f} ms", m.step_ms_min, m.step_ms_max) : std::string("-");
}

}  // namespace

std::string optimize_table(const OptimizeSummary& s) {
  auto row = [](const char* what, const std::string& a, const std::string& b) {
    return fmt::format("| {:<22} | {:>17} | {:>17} |\n", what, a, b);
  };
  const bool fits = s.baseline.measured;
  std::string t = row("", "baseline", "planned") + "|" + std::string(24, '-') + "|" + std::string(19, '-') + "|" +
                  std::string(19, '-') + "|\n";
  auto base_bytes = [&](int64_t b) { return fits ? format_bytes(b) : std::string("does not fit"); };
  t += row("measured peak", base_bytes(s.baseline.peak_bytes), format_bytes(s.planned.peak_bytes));
  t += row("reserved peak", base_bytes(s.baseline.reserved_peak_bytes), format_bytes(s.planned.reserved_peak_bytes));
  t += row("predicted peak", format_bytes(s.unplanned_peak), format_bytes(s.plan.predicted.peak_bytes));
  t += row("budget", "", format_bytes(s.plan.budget_bytes));
  t += row("step time", fits ? fmt::format("{:.2f} ms", s.baseline.step_ms) : "-", fmt::format("{:.2f} ms", s.planned.step_ms));
  t += row("step time range", fits ? ms_range(s.baseline) : "-", ms_range(s.planned));
  t += row("extra time", "", fits ? pct(s.planned.step_ms, s.baseline.step_ms) : "-");
  t += row("predicted extra time", "", fmt::format("{:.2f} ms", s.plan.predicted.extra_ms));
  t += row("activations dropped", "", fmt::format("{} ({})", s.plan.drop.size(), format_bytes(s.dropped_bytes)));
  if (!s.plan.swap.empty())
    t += row("swapped to host", "", fmt::format("{} ({} at once)", s.plan.swap.size(), format_bytes(s.plan.predicted.host_peak_bytes)));
  t += row("loss (last step)", fits ? fmt::format("{:.6f}", s.baseline.last_loss) : "-",
           fmt::format("{:.6f}", s.planned.last_loss));
  return t;
}

std::string optimize_details(const OptimizeSummary& s, const plan::PlanInput& in, size_t listed) {
  const std::vector<plan::ActivationRecord> records = plan::activation_records(in, s.plan);
  std::string out = spread_note(s.baseline, s.planned);
  out += "What lowered the peak:\n" + decision_lines(plan::decisions(in, s.plan));
  if (!s.plan.drop.empty()) out += "Recomputed activations:\n" + activation_lines(records, "recompute", listed);
  if (!s.plan.swap.empty()) out += "Swapped activations:\n" + activation_lines(records, "swap", listed);
  return out;
}

void write_optimize_report(const OptimizeSummary& s, const plan::PlanInput& in, const std::string& dir) {
  const std::vector<plan::ActivationRecord> records = plan::activation_records(in, s.plan);
  const std::string note = spread_note(s.baseline, s.planned);
  const bool fits = s.planned.peak_bytes <= s.plan.budget_bytes;
  std::string md = fmt::format("# mutwo optimize: {} on {}\n\nPlanner `{}`, budget {}.\n\n{}\n"
                               "Measured peak {} the budget. Bitwise check of loss and gradients: {}.\n\n"
                               "![memory](memory_timeline_before_after.svg)\n\n"
                               "Why each activation was kept or recomputed: `plan.csv` (`mutwo report --profile "
                               "profile.json --plan plan.json` writes it as a table).\n\n"
                               "## What lowered the peak\n\n{}\n{}"
                               "## Dropped activations by block\n\n{}",
                               s.what, s.device, s.plan.planner, format_bytes(s.plan.budget_bytes), optimize_table(s),
                               fits ? "fits" : "exceeds", s.check, decision_lines(plan::decisions(in, s.plan)),
                               note.empty() ? note : note + "\n", dropped_by_block(records));
  for (const char* decision : {"recompute", "swap"})
    if (std::any_of(records.begin(), records.end(), [&](const auto& a) { return a.decision == decision; }))
      md += fmt::format("\n## {} activations, by module and op\n\n{}",
                        decision == std::string("swap") ? "Swapped" : "Recomputed", activation_lines(records, decision, 0));
  md += fmt::format("\n## Reproduce\n\n```sh\n{}\n```\n", s.command);
  write_file(dir + "/report.md", md);
}

void write_tradeoff(const std::vector<plan::Plan>& plans, const profile::Profile& p, const std::string& dir) {
  std::string csv = "planner,budget_bytes,predicted_peak_bytes,predicted_extra_ms,feasible\n";
  std::string plot, missed;
  std::vector<std::string> names;
  for (const auto& pl : plans)
    if (std::find(names.begin(), names.end(), pl.planner) == names.end()) names.push_back(pl.planner);
  for (size_t i = 0; i < names.size(); ++i) {
    std::string dat;
    for (const auto& pl : plans) {
      if (pl.planner != names[i]) continue;
      csv += fmt::format("{},{},{},{:.6f},{}\n", pl.planner, pl.budget_bytes, pl.predicted.peak_bytes,
                         pl.predicted.extra_ms, int{pl.feasible});
      dat += fmt::format("{:.6f} {:.4f}\n", pl.predicted.extra_ms, mib(pl.predicted.peak_bytes));
      if (!pl.feasible) missed += fmt::format("{:.6f} {:.4f}\n", pl.predicted.extra_ms, mib(pl.predicted.peak_bytes));
    }
    write_file(dir + "/tradeoff_" + names[i] + ".dat", dat);
    plot += fmt::format("{}'tradeoff_{}.dat' using 1:2 with linespoints {} lw 2 lc rgb '{}' title '{}'", i ? ", " : "",
                        names[i], series_point(i), series_color(i), names[i]);
  }
  write_file(dir + "/tradeoff_missed.dat", missed);
  if (!missed.empty())
    plot += fmt::format(", 'tradeoff_missed.dat' using 1:2 with points pt 6 ps 3 lw 2 lc rgb '{}' "
                        "title 'plan missed its budget'", kMissedColor);
  write_file(dir + "/tradeoff.csv", csv);
  std::string body = fmt::format(
      "set title \"{}: predicted peak against extra recompute time\"\nset xlabel 'extra time (ms)'\n"
      "set ylabel 'predicted peak (MiB)'\nset grid\nset key outside right top\n"
      "set offsets graph 0.03, graph 0.03, graph 0.05, graph 0.05\nplot {}",
      p.label(), plot);
  report::plot(dir, "tradeoff", body, 900, 520);
}

void write_plan_report(const profile::Profile& p, const plan::SavedPlan& f, const std::string& dir) {
  std::string md = fmt::format(
      "# mutwo plan: {}\n\nPlanner `{}`, budget {}: predicted peak {} ({}; unplanned {}), predicted extra time "
      "{:.3f} ms on a {:.2f} ms step.\n\n",
      p.label(), f.planner, format_bytes(f.budget_bytes), format_bytes(f.predicted_peak_bytes),
      f.feasible ? "within the budget" : "**over the budget**", format_bytes(f.unplanned_peak_bytes),
      f.predicted_extra_ms, p.step_ms);
  if (!f.note.empty()) md += fmt::format("Note: {}\n\n", f.note);
  if (!f.decisions.empty() || f.predicted_peak_bytes == f.unplanned_peak_bytes)
    md += "## What lowered the peak\n\n" + decision_lines(f.decisions) + "\n";
  md += "![memory](memory_timeline.svg)\n![peak](peak_breakdown.svg)\n\n";

  // The planner's order first (rank), then the other candidates by ratio, then the rest.
  std::vector<const plan::ActivationRecord*> rows;
  for (const auto& a : f.activations) rows.push_back(&a);
  std::stable_sort(rows.begin(), rows.end(), [](const plan::ActivationRecord* a, const plan::ActivationRecord* b) {
    auto key = [](const plan::ActivationRecord* r) { return r->rank > 0 ? 0 : r->candidate ? 1 : 2; };
    if (key(a) != key(b)) return key(a) < key(b);
    if (a->rank != b->rank) return a->rank < b->rank;
    return a->ratio() > b->ratio();
  });
  md += "## Candidates, in the planner's order\n\n"
        "`rank`: when the planner picked it; `score`: bytes it freed per ms of recomputation not already paid for, "
        "when picked; `recompute ms` and `ratio` (bytes per ms): recomputing it alone under the final plan.\n\n"
        "| rank | module: op | activation | bytes | recompute ms | ratio (B/ms) | score (B/ms) | decision | why |\n"
        "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto* a : rows) {
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", a->rank > 0 ? std::to_string(a->rank) : "",
                      a->op.empty() ? "" : a->label(), a->name,
                      format_bytes(a->bytes), a->candidate ? fmt::format("{:.4f}", a->recompute_ms) : "",
                      a->candidate && a->recompute_ms > 0 ? fmt::format("{:.0f}", a->ratio()) : "",
                      a->rank > 0 ? fmt::format("{:.0f}", a->score) : "", a->decision, a->reason);
  }
  md += "\n## Dropped activations by block\n\n" + dropped_by_block(f.activations);
  write_file(dir + "/report.md", md);
}

}  // namespace mutwo::report
