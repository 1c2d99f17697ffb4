// Reports from a Profile (plain data only): CSV tables, gnuplot plots (SVG and
// PNG, rendered from data files written next to them) and a Chrome trace.
#pragma once

#include <string>
#include <vector>

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

// What `mutwo profile --out DIR` writes: profile.json, nodes.csv,
// activations.csv, trace.json and the memory timeline and peak breakdown plots.
void write_profile_dir(const profile::Profile& p, const std::string& dir);

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

// Runs gnuplot on a script in `dir`; false if gnuplot is missing.
bool render(const std::string& dir, const std::string& script);

// Writes DIR/NAME.gp drawing `body` (gnuplot commands ending in a plot
// command, reading data files in `dir`) to NAME.svg and NAME.png of w x h
// pixels, and renders it; false if gnuplot is missing.
bool plot(const std::string& dir, const std::string& name, const std::string& body, int w = 1100, int h = 520);

}  // namespace mutwo::report
