// What `mutwo sweep --out DIR` writes from its measured points: sweep.csv,
// the peak and time plots (points whose plan missed its budget marked), the
// table and report.md.
#include <fmt/format.h>

#include "report/report.h"
#include "support/files.h"
#include "support/units.h"

namespace mutwo::report {

const char* const kSweepCsvHeader =
    "model,device,batch,variant,budget_bytes,peak_bytes,predicted_peak_bytes,step_ms,feasible";

namespace {

const char* feasible_cell(const SweepPoint& p) {
  if (!p.feasible) return "";
  return *p.feasible ? "1" : "0";
}

// NAME_VARIANT.dat per variant and NAME_missed.dat (the points whose plan
// missed its budget), one line per batch; then one plot of them all.
void plot_sweep(const Sweep& s, const std::string& dir, const std::string& name, const std::string& title,
                const std::string& ylabel, bool memory) {
  auto y = [&](const SweepPoint& p) { return memory ? mib(p.peak_bytes) : p.step_ms; };
  std::string plot, missed, budget;
  for (size_t i = 0; i < s.variants.size(); ++i) {
    std::string dat;
    for (const auto& p : s.points)
      if (p.variant == s.variants[i]) {
        dat += fmt::format("{} {:.4f}\n", p.batch, y(p));
        if (p.feasible && !*p.feasible) missed += fmt::format("{} {:.4f}\n", p.batch, y(p));
        if (memory && p.variant == s.planner && p.budget_bytes > 0)
          budget += fmt::format("{} {:.4f}\n", p.batch, mib(p.budget_bytes));
      }
    write_file(fmt::format("{}/{}_{}.dat", dir, name, s.variants[i]), dat);
    plot += fmt::format("{}'{}_{}.dat' using 1:2 with linespoints {} lw 2 lc rgb '{}' title '{}'", i ? ", " : "", name,
                        s.variants[i], series_point(i), series_color(i), s.variants[i]);
  }
  if (!budget.empty()) {
    write_file(fmt::format("{}/{}_budget.dat", dir, name), budget);
    plot += fmt::format(", '{}_budget.dat' using 1:2 with lines dt 2 lw 1.5 lc rgb '{}' title '{} budget'", name,
                        kBudgetColor, s.planner);
  }
  write_file(fmt::format("{}/{}_missed.dat", dir, name), missed);
  if (!missed.empty())
    plot += fmt::format(", '{}_missed.dat' using 1:2 with points pt 6 ps 3 lw 2 lc rgb '{}' title 'plan missed its budget'",
                        name, kMissedColor);
  std::string body = fmt::format("set title \"{}\"\nset xlabel 'batch'\nset ylabel '{}'\nset grid\nset key top left\n"
                                 "set yrange [0:*]\nset offsets graph 0.03, graph 0.03, 0, 0\nplot {}",
                                 title, ylabel, plot);
  report::plot(dir, name, body, 900, 500);
}

}  // namespace

std::string sweep_table(const Sweep& s) {
  std::string t = "| batch | variant | budget | peak | predicted | within budget | step ms |\n|---|---|---|---|---|---|---|\n";
  for (const auto& p : s.points)
    t += fmt::format("| {} | {} | {} | {} | {} | {} | {:.2f} |\n", p.batch, p.variant,
                     p.budget_bytes ? format_bytes(p.budget_bytes) : "", format_bytes(p.peak_bytes),
                     format_bytes(p.predicted_peak_bytes), !p.feasible ? "" : *p.feasible ? "yes" : "**no**", p.step_ms);
  t += "\n" + sweep_missed_line(s) + "\n";
  return t;
}

std::string sweep_missed_line(const Sweep& s) {
  std::string missed;
  int n = 0;
  for (const auto& p : s.points)
    if (p.feasible && !*p.feasible) {
      missed += fmt::format("{}batch {} {} (predicted {}, {:.1f}% over its budget of {})", n++ ? ", " : "", p.batch,
                            p.variant, format_bytes(p.predicted_peak_bytes),
                            p.budget_bytes > 0 ? 100.0 * static_cast<double>(p.predicted_peak_bytes - p.budget_bytes) /
                                                     static_cast<double>(p.budget_bytes)
                                               : 0.0,
                            format_bytes(p.budget_bytes));
    }
  if (!n) return "Every plan met its budget.";
  return fmt::format("Missed its budget ({} of the planned points, measured anyway): {}.", n, missed);
}

void write_sweep_dir(const Sweep& s, const std::string& dir) {
  make_dirs(dir);
  std::string csv = std::string(kSweepCsvHeader) + "\n";
  for (const auto& p : s.points)
    csv += fmt::format("{},{},{},{},{},{},{},{:.4f},{}\n", s.model, s.device, p.batch, p.variant, p.budget_bytes,
                       p.peak_bytes, p.predicted_peak_bytes, p.step_ms, feasible_cell(p));
  write_file(dir + "/sweep.csv", csv);
  const std::string what = fmt::format("{} on {}", s.model, s.device);
  plot_sweep(s, dir, "peak_vs_batch", what + ": measured peak against batch size", "MiB", true);
  plot_sweep(s, dir, "time_vs_batch", what + ": step time against batch size", "ms (median step)", false);
  write_file(dir + "/report.md",
             fmt::format("# mutwo sweep: {}\n\nPlanner `{}` at budget {}{}; per-layer checkpointing for comparison.\n\n"
                         "{}\n![peak](peak_vs_batch.svg)\n![time](time_vs_batch.svg)\n\n## Reproduce\n\n```sh\n{}\n```\n",
                         what, s.planner, s.budget,
                         !s.budget.empty() && s.budget.back() == '%' ? " of each batch's activation memory" : " at every batch",
                         sweep_table(s), s.command));
}

}  // namespace mutwo::report
