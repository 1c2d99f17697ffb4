// The one planner's decisions as operators, for mutwo.torch's compiled route
// (python/mutwo/compiled/): the budget grammar (support/units.h), the device
// rate table's roofline (profile/rates.h) and the compiled route's choices
// (plan/compiled.h, plan/compiled_step.h), with the block rule (plan/blocks.h) and PyTorch's min-cut
// (plan/min_cut.h). Plain lists in, indices and numbers out; errors as
// library.cpp's ("mutwo: ", one line).
#include <torch/library.h>

#include <tuple>
#include <utility>

#include "plan/blocks.h"
#include "plan/compiled.h"
#include "plan/compiled_step.h"
#include "plan/min_cut.h"
#include "profile/rates.h"
#include "support/error.h"
#include "torchext/translated.h"
#include "support/units.h"

namespace mutwo::torchext {

namespace {

// ("bytes", n, 0), ("fraction", 0, f) or ("lowest", 0, 0).
std::tuple<std::string, int64_t, double> parse_budget_op(const std::string& text) {
  return translated([&] {
    const Budget b = parse_budget(text);
    const char* kind = b.kind == Budget::Kind::bytes ? "bytes" : b.kind == Budget::Kind::fraction ? "fraction" : "lowest";
    return std::tuple<std::string, int64_t, double>{kind, b.bytes, b.fraction};
  });
}

int64_t budget_of_fraction_op(double fraction, int64_t fixed, int64_t activation) {
  return budget_of_fraction(fraction, fixed, activation);
}

std::string percent_at_least_op(int64_t bytes, int64_t fixed, int64_t activation) {
  return translated([&] { return percent_at_least(bytes, fixed, activation); });
}

// Per op: its roofline ms on `device`, or, where `fused` is set (a pointwise op
// recomputed inside its consumer's kernel), kFusedPointwiseShare of what it reads.
std::vector<double> roofline(const std::string& device, std::vector<double> flops, std::vector<int64_t> read,
                             std::vector<int64_t> written, std::vector<int64_t> element, std::vector<int64_t> fused) {
  return translated([&] {
    const size_t n = flops.size();
    MUTWO_CHECK(read.size() == n && written.size() == n && element.size() == n && fused.size() == n,
                "roofline: lists of {} ops differ in length", n);
    const profile::DeviceRates& rates = profile::device_rates(device);
    std::vector<double> ms(n);
    for (size_t i = 0; i < n; ++i)
      ms[i] = fused[i] ? profile::kFusedPointwiseShare * static_cast<double>(read[i]) / rates.memory_bytes_per_s * 1e3
                       : profile::roofline_ms(rates, flops[i], static_cast<double>(read[i] + written[i]),
                                              static_cast<int>(element[i]));
    return ms;
  });
}

std::vector<int64_t> recompute_order(std::vector<double> ms, std::vector<int64_t> bytes) {
  return translated([&] {
    std::vector<int32_t> order = plan::compiled::recompute_order(ms, bytes);
    return std::vector<int64_t>(order.begin(), order.end());
  });
}

// [1, k per layer...] or [0] when nothing frees `need`.
std::vector<int64_t> solve_layers(std::vector<int64_t> k, std::vector<int64_t> freed, std::vector<double> ms,
                                  int64_t count, int64_t need) {
  return translated([&] {
    MUTWO_CHECK(freed.size() == k.size() && ms.size() == k.size(), "solve_layers: lists of {} options differ", k.size());
    std::vector<plan::compiled::LayerOption> options;
    for (size_t i = 0; i < k.size(); ++i) options.push_back({static_cast<int32_t>(k[i]), freed[i], ms[i]});
    auto solved = plan::compiled::solve_layers(options, static_cast<int32_t>(count), need);
    std::vector<int64_t> out{solved ? 1 : 0};
    if (solved) out.insert(out.end(), solved->begin(), solved->end());
    return out;
  });
}

// PyTorch's dp_knapsack's answer: (max runtime, saved, recomputed).
std::tuple<double, std::vector<int64_t>, std::vector<int64_t>> dp_knapsack(std::vector<double> memory,
                                                                            std::vector<double> runtime,
                                                                            double max_memory) {
  return translated([&] {
    plan::compiled::Knapsack k = plan::compiled::dp_knapsack(memory, runtime, max_memory);
    return std::make_tuple(k.max_runtime, std::vector<int64_t>(k.saved.begin(), k.saved.end()),
                           std::vector<int64_t>(k.recomputed.begin(), k.recomputed.end()));
  });
}

std::vector<plan::compiled::Priced> priced(const std::vector<int64_t>& peaks, const std::vector<double>& ms) {
  MUTWO_CHECK(peaks.size() == ms.size(), "{} peaks for {} times", peaks.size(), ms.size());
  std::vector<plan::compiled::Priced> out;
  for (size_t i = 0; i < peaks.size(); ++i) out.push_back({peaks[i], ms[i]});
  return out;
}

int64_t fastest_within(std::vector<int64_t> peaks, std::vector<double> ms, int64_t budget) {
  return translated([&] { return int64_t{plan::compiled::fastest_within(priced(peaks, ms), budget)}; });
}

int64_t lowest(std::vector<int64_t> peaks, std::vector<double> ms) {
  return translated([&] { return int64_t{plan::compiled::lowest(priced(peaks, ms))}; });
}

// (peak, saved bytes at the peak, bytes retained) of one phase's memory events (plan::compiled::Phase).
std::tuple<int64_t, int64_t, int64_t> phase_peak(std::vector<int64_t> bytes, std::vector<int64_t> made,
                                                 std::vector<int64_t> freed, std::vector<int64_t> saved,
                                                 std::vector<int64_t> workspace) {
  return translated([&] {
    const plan::compiled::PhasePeak p = plan::compiled::phase_peak(
        {std::move(bytes), std::move(made), std::move(freed), std::vector<uint8_t>(saved.begin(), saved.end()),
         std::move(workspace)});
    return std::tuple<int64_t, int64_t, int64_t>{p.peak, p.saved_at_peak, p.retained};
  });
}

// PyTorch's min-cut on edge lists (plan::min_cut): (unbounded, the cut's
// capacity, the sink side's nodes); capacity -1 is unbounded.
std::tuple<bool, int64_t, std::vector<int64_t>> min_cut(int64_t nodes, std::vector<int64_t> tail,
                                                        std::vector<int64_t> head, std::vector<int64_t> capacity,
                                                        int64_t source, int64_t sink) {
  return translated([&] {
    const plan::MinCut cut = plan::min_cut(nodes, tail, head, capacity, source, sink);
    std::vector<int64_t> sink_side;
    for (size_t v = 0; v < cut.sink.size(); ++v)
      if (cut.sink[v]) sink_side.push_back(static_cast<int64_t>(v));
    return std::tuple<bool, int64_t, std::vector<int64_t>>{cut.unbounded, cut.value, std::move(sink_side)};
  });
}

// The offload order (plan::compiled::offload_order) as four lists: the saved
// tensor's index, where its copy out ends, where its copy back starts, its exposed ms.
std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>, std::vector<double>> offload_order(
    std::vector<double> node_ms, std::vector<int64_t> bytes, std::vector<int64_t> last_forward_read,
    std::vector<int64_t> first_backward_read, const std::string& device, double d2h_gbps, double h2d_gbps,
    bool overlap, int64_t host_limit) {
  return translated([&] {
    MUTWO_CHECK(last_forward_read.size() == bytes.size() && first_backward_read.size() == bytes.size(),
                "offload_order: lists of {} saved tensors differ in length", bytes.size());
    plan::compiled::OffloadRequest r{std::move(node_ms), {}, device, d2h_gbps, h2d_gbps, overlap, host_limit};
    for (size_t i = 0; i < bytes.size(); ++i)
      r.saved.push_back({bytes[i], static_cast<int32_t>(last_forward_read[i]), static_cast<int32_t>(first_backward_read[i])});
    std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>, std::vector<double>> out;
    for (const plan::compiled::Offloaded& o : plan::compiled::offload_order(r)) {
      std::get<0>(out).push_back(o.saved);
      std::get<1>(out).push_back(o.gone_after);
      std::get<2>(out).push_back(o.back_at);
      std::get<3>(out).push_back(o.exposed_ms);
    }
    return out;
  });
}

// The repeated layer of each module path (plan::block_of), "" for none.
std::vector<std::string> blocks_of(std::vector<std::string> scopes) {
  for (std::string& s : scopes) s = plan::block_of(s);
  return scopes;
}

// One candidate per graph of a step (plan/compiled_step.h): per graph its
// candidate count, then every graph's ms and row-major deltas and its allowed
// candidates, concatenated in graph order; method "greedy" skips the exhaustive search.
std::tuple<std::vector<int64_t>, int64_t, double, bool, int64_t, std::vector<int64_t>, std::string> solve_step(
    std::vector<int64_t> base, std::vector<int64_t> candidates, std::vector<double> ms, std::vector<int64_t> delta,
    std::vector<int64_t> allowed_count, std::vector<int64_t> allowed, int64_t budget, const std::string& method) {
  return translated([&] {
    MUTWO_CHECK(allowed_count.size() == candidates.size(), "solve_step: {} graphs, {} allowed counts",
                candidates.size(), allowed_count.size());
    MUTWO_CHECK(method == "auto" || method == "greedy", "solve_step: method {}: auto or greedy", method);
    plan::compiled::StepProblem p{base, {}, budget};
    if (method == "greedy") p.exhaustive = 0;
    size_t at_ms = 0, at_allowed = 0;
    for (size_t g = 0; g < candidates.size(); ++g) {
      const auto n = static_cast<size_t>(candidates[g]), a = static_cast<size_t>(allowed_count[g]);
      MUTWO_CHECK(at_ms + n <= ms.size() && (at_ms + n) * base.size() <= delta.size() && at_allowed + a <= allowed.size(),
                  "solve_step: graph {}'s {} candidates run past the lists", g, n);
      plan::compiled::StepGraph graph;
      graph.ms.assign(ms.begin() + at_ms, ms.begin() + at_ms + n);
      graph.delta.assign(delta.begin() + at_ms * base.size(), delta.begin() + (at_ms + n) * base.size());
      graph.allowed.assign(allowed.begin() + at_allowed, allowed.begin() + at_allowed + a);
      p.graphs.push_back(std::move(graph));
      at_ms += n, at_allowed += a;
    }
    MUTWO_CHECK(at_ms == ms.size() && at_ms * base.size() == delta.size() && at_allowed == allowed.size(),
                "solve_step: the lists hold more than {} candidates", at_ms);
    plan::compiled::StepChoice c = plan::compiled::solve_step(p);
    return std::tuple<std::vector<int64_t>, int64_t, double, bool, int64_t, std::vector<int64_t>, std::string>{
        {c.choice.begin(), c.choice.end()}, c.peak, c.extra_ms, c.feasible, c.floor,
        {c.floor_choice.begin(), c.floor_choice.end()}, c.method};
  });
}

bool surely_below(int64_t budget, int64_t lowest) { return plan::compiled::surely_below(budget, lowest); }

std::string refusal_text(int64_t budget, int64_t lowest, int64_t unplanned, const std::string& what, int64_t fixed,
                         int64_t activation, int64_t compiles, int64_t host, int64_t host_limit,
                         int64_t roomier_lowest, int64_t roomier_host) {
  return translated([&] {
    return plan::compiled::refusal_text({budget, lowest, unplanned, what, fixed, activation,
                                         static_cast<int32_t>(compiles), host, host_limit, roomier_lowest, roomier_host});
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mutwo, m) {
  m.def("parse_budget(str text) -> (str, int, float)", &parse_budget_op);
  m.def("budget_of_fraction(float fraction, int fixed, int activation) -> int", &budget_of_fraction_op);
  m.def("percent_at_least(int bytes, int fixed, int activation) -> str", &percent_at_least_op);
  m.def("roofline(str device, float[] flops, int[] read, int[] written, int[] element, int[] fused) -> float[]", &roofline);
  m.def("recompute_order(float[] ms, int[] bytes) -> int[]", &recompute_order);
  m.def("solve_layers(int[] k, int[] freed, float[] ms, int count, int need) -> int[]", &solve_layers);
  m.def("dp_knapsack(float[] memory, float[] runtime, float max_memory) -> (float, int[], int[])", &dp_knapsack);
  m.def("fastest_within(int[] peaks, float[] ms, int budget) -> int", &fastest_within);
  m.def("lowest(int[] peaks, float[] ms) -> int", &lowest);
  m.def("phase_peak(int[] bytes, int[] made, int[] freed, int[] saved, int[] workspace) -> (int, int, int)", &phase_peak);
  m.def("offload_order(float[] node_ms, int[] bytes, int[] last_forward_read, int[] first_backward_read, str device, "
        "float d2h_gbps, float h2d_gbps, bool overlap, int host_limit) -> (int[], int[], int[], float[])",
        &offload_order);
  m.def("min_cut(int nodes, int[] tail, int[] head, int[] capacity, int source, int sink) -> (bool, int, int[])",
        &min_cut);
  m.def("blocks_of(str[] scopes) -> str[]", &blocks_of);
  m.def("solve_step(int[] base, int[] candidates, float[] ms, int[] delta, int[] allowed_count, int[] allowed, "
        "int budget, str method=\"auto\") -> (int[], int, float, bool, int, int[], str)", &solve_step);
  m.def("surely_below(int budget, int lowest) -> bool", &surely_below);
  m.def("refusal_text(int budget, int lowest, int unplanned, str what, int fixed, int activation, int compiles, "
        "int host=0, int host_limit=0, int roomier_lowest=0, int roomier_host=0) -> str",
        &refusal_text);
}

}  // namespace mutwo::torchext
