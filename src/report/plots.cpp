// gnuplot plots of Profiles: data files and scripts written side by side, then
// rendered to SVG and PNG.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "report/report.h"
#include "support/error.h"
#include "support/files.h"

namespace mutwo::report {

namespace {

using ir::Role;

// Bottom to top: what lives across steps first, then what the step makes.
constexpr std::array<Role, ir::kNumRoles> kStack = {Role::input,    Role::parameter,  Role::optimizer_state,
                                                    Role::buffer,   Role::gradient,   Role::activation,
                                                    Role::other};
}  // namespace

const char* role_color(Role r) {
  switch (r) {
    case Role::input: return "#9e9e9e";
    case Role::parameter: return "#1f77b4";
    case Role::optimizer_state: return "#9467bd";
    case Role::buffer: return "#8c564b";
    case Role::gradient: return "#2ca02c";
    case Role::activation: return "#ff7f0e";
    case Role::other: return "#d0d0d0";
  }
  return "#000000";
}
const char* const kMissedColor = "#d62728";     // red: used by nothing else
const char* const kBudgetColor = "#7f7f7f";     // grey, dashed
const char* const kWorkspaceColor = "#e377c2";  // pink

// Distinct from each other and from the three colours above. Plots have at
// most four series (plan --sweep: per-layer, sqrt-n and the planner).
const char* series_color(size_t i) {
  static const char* const kSeries[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                        "#17becf", "#bcbd22", "#393b79", "#637939", "#843c39"};
  MUTWO_ASSERT(i < sizeof(kSeries) / sizeof(kSeries[0]), "a plot with more series ({}) than distinct colours", i + 1);
  return kSeries[i];
}

std::string series_point(size_t i) {
  static const int kShapes[] = {7, 5, 9, 11, 13};  // circle, square, triangles, diamond (filled)
  return fmt::format("pt {} ps {:.2f}", kShapes[i % 5], std::max(0.8, 2.0 - 0.4 * static_cast<double>(i)));
}

double mib(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

namespace {

// The same plot to SVG, then PNG by replot (running the commands twice would
// set every label and arrow twice: the PNG drew them twice, bold and blurred).
std::string terminals(const std::string& name, const std::string& plot, int w = 1100, int h = 520) {
  return fmt::format(
      "set termoption noenhanced\nset terminal svg size {w},{h} dynamic background rgb 'white' font 'sans,11' noenhanced\nset output '{n}.svg'\n{p}\n"
      "set terminal pngcairo size {w},{h} background rgb 'white' font 'sans,10' noenhanced\nset output '{n}.png'\nreplot\n",
      fmt::arg("w", w), fmt::arg("h", h), fmt::arg("n", name), fmt::arg("p", plot));
}

std::string title(const profile::Profile& p) {
  return p.label();
}

}  // namespace

bool plot(const std::string& dir, const std::string& name, const std::string& body, int w, int h) {
  write_file(dir + "/" + name + ".gp", terminals(name, body, w, h));
  return render(dir, name + ".gp");
}

bool render(const std::string& dir, const std::string& script) {
  static int available = -1;
  if (available < 0) {
    available = std::system("command -v gnuplot >/dev/null 2>&1") == 0;
    if (!available)
      std::fprintf(stderr, "mutwo: gnuplot not found: plots are not rendered (install gnuplot-nox); "
                           "their data files and scripts are written\n");
  }
  if (!available) return false;
  std::string cmd = fmt::format("cd '{}' && gnuplot '{}' 2>gnuplot.log", dir, script);
  MUTWO_CHECK(std::system(cmd.c_str()) == 0, "gnuplot failed on {}/{}; see {}/gnuplot.log", dir, script, dir);
  std::remove((dir + "/gnuplot.log").c_str());
  return true;
}

bool plot_memory_timeline(const profile::Profile& p, const std::string& dir) {
  // Columns: rank, the stack's running sums bottom to top, the measured bytes
  // during the node, and the top of the workspace band (the measured bytes
  // where they pass the live tensors, else the stack's top).
  std::string dat = "# rank";
  for (Role r : kStack) dat += fmt::format(" {}", ir::to_string(r));
  dat += " measured workspace_top\n";
  for (const auto& n : p.nodes) {
    dat += fmt::format("{}", n.rank);
    double cum = 0;
    for (Role r : kStack) dat += fmt::format(" {:.4f}", cum += mib(n.live_by_role[static_cast<size_t>(r)]));
    dat += fmt::format(" {:.4f} {:.4f}\n", mib(n.peak_during), std::max(cum, mib(n.peak_during)));
  }
  write_file(dir + "/memory_timeline.dat", dat);

  const size_t measured_col = kStack.size() + 2;
  // Legend top to bottom as the stack reads: workspace, then the roles from the top down.
  std::string layers = fmt::format(
      "'memory_timeline.dat' using 1:{}:{} with filledcurves lc rgb '{}' title 'workspace', ",
      measured_col - 1, measured_col + 1, kWorkspaceColor);
  for (int i = static_cast<int>(kStack.size()) - 1; i >= 0; --i)
    layers += fmt::format("'memory_timeline.dat' using 1:{} with filledcurves x1 lc rgb '{}' title '{}', ", i + 2,
                          role_color(kStack[static_cast<size_t>(i)]), ir::to_string(kStack[static_cast<size_t>(i)]));
  int32_t bwd = p.first_backward_rank();
  const double share = p.peak_bytes ? 100.0 * static_cast<double>(p.activation_bytes_at_peak()) /
                                          static_cast<double>(p.peak_bytes)
                                    : 0.0;
  const size_t last = p.nodes.empty() ? 1 : p.nodes.size() - 1;
  std::string marks;
  if (bwd >= 0)
    marks += fmt::format("set arrow from {0}, graph 0 to {0}, graph 1 nohead dt 2 lc rgb 'black'\n"
                         "set label 'backward' at {0}, graph 0.97 offset 0.5,0\n", bwd);
  if (p.peak_node >= 0) {
    // The peak's label sits beside its marker, in the headroom above the
    // curves (the y range leaves 15% above the peak), on the side away from
    // the backward line and its label (the peak is often next to it), unless
    // that side has no room.
    const double at = static_cast<double>(p.peak_node) / static_cast<double>(last);
    bool left = bwd < 0 ? at > 0.5 : p.peak_node < bwd;
    if (left && at < 0.2) left = false;
    if (!left && at > 0.8) left = true;
    marks += fmt::format("set label 'peak {0:.1f} MiB' at {1}, {2:.4f} {3} point pt 7 ps 1.2 lc rgb 'black' "
                         "offset {4},1.2\n",
                         mib(p.peak_bytes), p.peak_node, mib(p.peak_bytes), left ? "right" : "left", left ? "-1" : "1");
  }
  std::string plot = fmt::format(
      "set title \"{}: live memory by role (measured peak {:.1f} MiB at node {}, activations {:.0f}% of it)\"\n"
      "set xlabel 'node (execution order)'\nset ylabel 'MiB'\nset key outside right top\nset grid ytics\n"
      "set style fill solid 0.85 noborder\nset xrange [0:{}]\nset yrange [0:{:.4f}]\n{}"
      "plot {}'memory_timeline.dat' using 1:{} with lines lw 1.2 lc rgb 'black' title 'measured (during node)'",
      title(p), mib(p.peak_bytes), p.peak_node, share, last, 1.15 * std::max(mib(p.peak_bytes), 1e-3), marks, layers,
      measured_col);
  return report::plot(dir, "memory_timeline", plot);
}

bool plot_peak_breakdown(const profile::Profile& p, const std::string& dir) {
  // One bar per role in its colour (as in the timeline), and the workspace.
  std::string dat = "# role MiB colour\n";
  auto rgb = [](const char* hex) { return std::stoi(std::string(hex + 1), nullptr, 16); };
  for (Role r : kStack)
    dat += fmt::format("{} {:.4f} {}\n", ir::to_string(r), mib(p.peak_by_role[static_cast<size_t>(r)]),
                       rgb(role_color(r)));
  dat += fmt::format("workspace {:.4f} {}\n", mib(p.peak_workspace_bytes), rgb(kWorkspaceColor));
  write_file(dir + "/peak_breakdown.dat", dat);
  std::string plot = fmt::format(
      "set title \"{}: the peak ({:.1f} MiB at node {}) by role\"\nset ylabel 'MiB'\nset style fill solid 0.85 noborder\n"
      "set boxwidth 0.7\nset grid ytics\nset yrange [0:*]\nset offsets 0, 0, graph 0.1, 0\nset xtics rotate by -30\n"
      "unset key\nplot 'peak_breakdown.dat' using 0:2:3:xtic(1) with boxes lc rgb variable, '' using 0:2:(sprintf('%.1f',$2)) "
      "with labels offset 0,0.7",
      title(p), mib(p.peak_bytes), p.peak_node);
  return report::plot(dir, "peak_breakdown", plot, 800, 480);
}

bool plot_batches(const std::vector<profile::Profile>& ps, const std::string& dir) {
  MUTWO_ASSERT(!ps.empty(), "no profiles to plot");
  // The header is a comment: read as a row, it made an empty first bar.
  std::string dat = "# batch";
  for (Role r : kStack) dat += fmt::format(" {}", ir::to_string(r));
  dat += " workspace peak step_ms\n";
  for (const auto& p : ps) {
    dat += fmt::format("{}", p.batch);
    for (Role r : kStack) dat += fmt::format(" {:.4f}", mib(p.peak_by_role[static_cast<size_t>(r)]));
    dat += fmt::format(" {:.4f} {:.4f} {:.4f}\n", mib(p.peak_workspace_bytes), mib(p.peak_bytes), p.step_ms);
  }
  write_file(dir + "/batches.dat", dat);
  std::string cols;
  for (size_t i = 0; i < kStack.size(); ++i)
    cols += fmt::format("{}'batches.dat' using {}{} lc rgb '{}' title '{}'", i ? ", " : "", i + 2,
                        i == 0 ? ":xtic(1)" : "", role_color(kStack[i]), ir::to_string(kStack[i]));
  cols += fmt::format(", 'batches.dat' using {} lc rgb '{}' title 'workspace'", kStack.size() + 2, kWorkspaceColor);
  std::string peak = fmt::format(
      "set title \"{} on {}: peak memory by role against batch size\"\nset xlabel 'batch'\nset ylabel 'MiB'\n"
      "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.85 noborder\n"
      "set boxwidth 0.6\nset key outside right top invert\nset grid ytics\nset yrange [0:*]\nplot {}",
      ps[0].model, ps[0].device, cols);
  bool a = report::plot(dir, "peak_vs_batch", peak, 900, 500);
  std::string latency = fmt::format(
      "set title \"{} on {}: step time against batch size\"\nset xlabel 'batch'\nset ylabel 'ms (median step)'\n"
      "set grid\nset yrange [0:*]\nunset key\nplot 'batches.dat' using 1:{} with linespoints pt 7 lw 2 lc rgb '{}'",
      ps[0].model, ps[0].device, kStack.size() + 4, series_color(0));
  return report::plot(dir, "latency_vs_batch", latency, 800, 480) && a;
}

// Both measured timelines (allocated bytes at their high-water mark during every node) on one plot.
void plot_before_after(const profile::Profile& before, const profile::Profile& after, int64_t budget,
                       const std::string& dir) {
  std::string dat = "# node before_MiB after_MiB\n";
  size_t n = std::max(before.nodes.size(), after.nodes.size());
  for (size_t i = 0; i < n; ++i)
    dat += fmt::format("{} {} {}\n", i,
                       i < before.nodes.size() ? fmt::format("{:.4f}", mib(before.nodes[i].peak_during)) : "NaN",
                       i < after.nodes.size() ? fmt::format("{:.4f}", mib(after.nodes[i].peak_during)) : "NaN");
  write_file(dir + "/memory_timeline_before_after.dat", dat);
  std::string body = fmt::format(
      "set title \"{0}: measured memory, without and with recomputation\"\n"
      "set xlabel 'node (execution order)'\nset ylabel 'MiB allocated (during node)'\nset grid\nset key top left\n"
      "set arrow from graph 0, first {1:.4f} to graph 1, first {1:.4f} nohead dt 2 lc rgb '{2}'\n"
      "set label 'budget' at graph 0.01, first {1:.4f} offset 0,0.6 tc rgb '{2}'\n",
      before.label(), mib(budget), kBudgetColor);
  body += fmt::format("plot 'memory_timeline_before_after.dat' using 1:2 with lines lw 2 lc rgb '{}' title 'baseline', "
                     "'' using 1:3 with lines lw 2 lc rgb '{}' title 'with recomputation'",
                     series_color(0), series_color(1));
  plot(dir, "memory_timeline_before_after", body);
}

}  // namespace mutwo::report
