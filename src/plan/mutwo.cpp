// The mu-TWO greedy (Purandare et al., MLSys 2023, Appendix A, Algorithms B
// to H): repeatedly take the choice freeing the most bytes per millisecond it
// costs, re-simulating the whole schedule after every choice, until the
// simulated peak fits the budget. A choice is to recompute a candidate (its
// cost: recomputation not already paid for) or, where the profile has copy
// speeds and swapping is allowed, to swap a storage to host memory (its cost:
// the part of its copies that the compute in its gap cannot hide, given the
// copies already chosen there; Algorithm C). As in Capuchin, which mu-TWO
// adapts, only candidates idle at the current peak are eligible (live there,
// with their last forward read before it and their next backward read after
// it): dropping anything else costs time and cannot lower the peak. (Live at
// the peak was the rule until the fused loss made the logits' last forward
// read the peak node: dropping them bought BERT-base 3.7 ms of recomputed
// vocabulary projection and no byte at the peak.) A choice that raises the
// simulated peak (its recomputation brings back more than it frees) is undone
// and the candidate kept, so the simulated peak never rises along the way.
// plan_mutwo then returns per-layer's or sqrt-n's plan instead where the same
// simulator finds it better (the greedy alone stopped above per-layer on
// ResNet-152 at batch 8, measured on an H100), so mutwo is never worse than those.
#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "plan/copy_streams.h"
#include "plan/plan.h"
#include "profile/rates.h"
#include "analysis/liveness.h"
#include "rewrite/recompute.h"
#include "rewrite/swap.h"
#include "support/error.h"
#include "support/units.h"

namespace mutwo::plan {

namespace {

// Recompute sources and subgraphs under the current choice of dropped values.
class Closures {
 public:
  // Nothing dropped yet: kept is the rewrite's rule (rewrite::kept_at_backward).
  explicit Closures(const PlanInput& in)
      : in_(in), uses_(in.graph), kept_(rewrite::kept_at_backward(in.graph, uses_, {})),
        mark_(in.graph.nodes().size(), 0) {}

  void drop(const Candidate& c) {
    for (ir::ValueId m : c.members) kept_[static_cast<size_t>(m)] = false;
  }
  void keep(const Candidate& c) {
    for (ir::ValueId m : c.members) kept_[static_cast<size_t>(m)] = true;
  }

  // Nodes that recomputing `c` crosses (its recompute subgraph) given what is
  // kept now; appended to `out` unless already stamped with `stamp`.
  void subgraph(const Candidate& c, uint32_t stamp, std::vector<int32_t>& out) {
    for (ir::ValueId m : c.members) walk(m, stamp, out, true);
  }

  double ms_outside(const std::vector<int32_t>& nodes_, const std::vector<bool>& recomputed) const {
    double t = 0;
    for (int32_t n : nodes_)
      if (!recomputed[static_cast<size_t>(n)]) t += in_.node_ms[static_cast<size_t>(n)];
    return t;
  }

 private:
  void walk(ir::ValueId v, uint32_t stamp, std::vector<int32_t>& out, bool root) {
    if (v == ir::kNoValue || (!root && kept_[static_cast<size_t>(v)])) return;
    int32_t p = uses_.producer[static_cast<size_t>(v)];
    if (p < 0 || mark_[static_cast<size_t>(p)] == stamp) return;
    mark_[static_cast<size_t>(p)] = stamp;
    out.push_back(p);
    for (ir::ValueId in : in_.graph.nodes()[static_cast<size_t>(p)].inputs) walk(in, stamp, out, false);
  }

  const PlanInput& in_;
  ir::UseIndex uses_;
  std::vector<bool> kept_;
  std::vector<uint32_t> mark_;
};

// One choice the greedy made: recompute cands[index], or swap swaps[index].
struct Taken {
  bool swap;
  size_t index;
};

// The first plan that fits may overshoot the budget: its last choices freed
// more than was still missing. Take back choices, latest (least bytes per ms)
// first, where the plan still fits and gets cheaper and its peak does not fall
// (so sweeps stay monotone: see docs/planners.md). Only the last kTakeBack
// choices are tried, one simulation each: the overshoot comes from the last
// picks (on transformer-lm every accepted take-back was among the last 4; on
// bert-large at batch 32 none of 264 trials was accepted, at half the planning time).
constexpr size_t kTakeBack = 16;

// The greedy: its candidates, the choices it made, and the state its loop
// carries from pick to pick. One object per plan: run() once.
class Greedy {
 public:
  Greedy(const PlanInput& in, int64_t budget)
      : in(in), budget(budget), cands(candidates(in)),
        swaps(in.can_swap() ? swap_candidates(in) : std::vector<ir::ValueId>{}), taken(cands.size(), false),
        swap_taken(swaps.size(), false), recomputed(in.graph.nodes().size(), false), closures(in), copies(in.node_ms, in.d2h_bytes_per_ms, in.h2d_bytes_per_ms, in.copies_overlap) {
    for (size_t i = 0; i < cands.size(); ++i) cand_of.emplace(cands[i].owner, i);
    if (!swaps.empty()) gaps = rewrite::swap_gaps(in.graph, analysis::analyze_liveness(in.graph));
  }

  Plan run();

 private:
  ir::ValueId owner(const Taken& t) const { return t.swap ? swaps[t.index] : cands[t.index].owner; }
  bool settled(ir::ValueId owner) const {  // recomputed (or tried), or swapped
    auto c = cand_of.find(owner);
    return (c != cand_of.end() && taken[c->second]) || swapped.count(owner) > 0;
  }
  Plan plan(const std::vector<Taken>& picks) const;  // `picks` simulated under the budget
  Taken next_pick(double& best_ratio);
  bool try_pick(const Taken& pick);
  void recount_recomputed();
  Plan take_back();
  Plan no_fit();

  const PlanInput& in;
  const int64_t budget;
  const std::vector<Candidate> cands;
  const std::vector<ir::ValueId> swaps;  // storage owners that may be swapped
  std::vector<Taken> chosen;
  std::vector<Choice> order;  // every pick, undone ones included: the reasoning plan.json records
  bool update_early = false;  // decided first: parameters updated as soon as the backward pass is done with them
  std::vector<bool> taken, swap_taken;
  std::unordered_map<ir::ValueId, size_t> cand_of;  // by storage owner
  std::vector<bool> recomputed;  // nodes some chosen candidate recomputes
  Closures closures;
  CopyStreams copies;
  std::vector<rewrite::Gap> gaps;
  CopyGap gap(ir::ValueId v) const {
    const rewrite::Gap& g = gaps[static_cast<size_t>(v)];
    return {g.before, g.after};
  }
  int64_t host_bytes = 0;  // swapped so far: what the host holds at most
  uint32_t stamp = 0;
  Plan best;
  std::vector<bool> at_peak, swap_at_peak;
  // Candidates made by one node (a split's query, key and value) share one
  // recompute subgraph: the first of them pays for all, so it is scored with
  // the bytes of its eligible siblings too, and they follow it for free.
  std::unordered_map<int32_t, std::vector<size_t>> siblings;  // by the node making them
  std::vector<int32_t> sub;
  std::unordered_set<ir::ValueId> swapped;  // storages the plan swaps
};

Plan Greedy::plan(const std::vector<Taken>& picks) const {
  std::vector<ir::ValueId> drop, swap;
  for (const Taken& t : picks) {
    if (t.swap) swap.push_back(swaps[t.index]);
    else drop.insert(drop.end(), cands[t.index].members.begin(), cands[t.index].members.end());
  }
  return finish(in, "mutwo", budget, std::move(drop), std::move(swap), update_early);
}

// argmax of bytes freed per ms of recomputation not already paid for, or of
// copy time the compute cannot hide; {false, cands.size()} when none is left.
Taken Greedy::next_pick(double& best_ratio) {
  Taken pick{false, cands.size()};
  best_ratio = -1;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (settled(cands[i].owner) || !at_peak[static_cast<size_t>(cands[i].owner)]) continue;
    sub.clear();
    closures.subgraph(cands[i], ++stamp, sub);
    double ms = closures.ms_outside(sub, recomputed);
    int64_t bytes = 0;
    for (size_t j : siblings[cands[i].made_by])
      if (!settled(cands[j].owner) && at_peak[static_cast<size_t>(cands[j].owner)]) bytes += cands[j].bytes;
    double ratio = recompute_ratio(bytes, ms);
    if (ratio > best_ratio) {
      best_ratio = ratio;
      pick = {false, i};
    }
  }
  for (size_t i = 0; i < swaps.size(); ++i) {
    const ir::ValueId o = swaps[i];
    const int64_t bytes = in.graph.type(o).bytes();
    if (swap_taken[i] || settled(o) || !swap_at_peak[static_cast<size_t>(o)] || host_bytes + bytes > in.host_limit_bytes)
      continue;
    double ratio = swap_ratio(bytes, copies.cost(bytes, gap(o)));
    if (ratio > best_ratio) {
      best_ratio = ratio;
      pick = {true, i};
    }
  }
  return pick;
}

// Dropping a candidate may lengthen the subgraphs of those chosen before (Algorithm E).
void Greedy::recount_recomputed() {
  std::fill(recomputed.begin(), recomputed.end(), false);
  ++stamp;
  for (const Taken& c : chosen) {
    if (c.swap) continue;
    sub.clear();
    closures.subgraph(cands[c.index], stamp, sub);
    for (int32_t n : sub) recomputed[static_cast<size_t>(n)] = true;
  }
}

// `pick`, already marked taken and recorded in `chosen` and `order`, kept
// where the re-simulated schedule does not raise the peak (then `best`);
// undone otherwise (false).
bool Greedy::try_pick(const Taken& pick) {
  const ir::ValueId v = owner(pick);
  if (!pick.swap) closures.drop(cands[pick.index]);
  // Re-simulate the real schedule, recomputation and copies included (Algorithm G).
  Plan p = plan(chosen);
  // A swap must lower the peak: its bytes are gone from the peak only when
  // the copy out is done before it and the copy back starts after it, which
  // the cost estimate does not see. One that does not is undone, and the
  // storage stays open to recomputation.
  if (pick.swap && p.predicted.peak_bytes >= best.predicted.peak_bytes) {
    chosen.pop_back();
    order.back().outcome = Choice::Outcome::raised_peak;
    return false;
  }
  if (p.predicted.peak_bytes > best.predicted.peak_bytes) {
    // It costs more memory where the peak now is than it frees: keep it
    // (decided once; the sequence of choices stays the same for every
    // budget, so a smaller budget still extends a larger one's plan).
    closures.keep(cands[pick.index]);
    chosen.pop_back();
    order.back().outcome = Choice::Outcome::raised_peak;
    return false;
  }
  if (pick.swap) {
    swapped.insert(v);
    host_bytes += in.graph.type(v).bytes();
    copies.take(in.graph.type(v).bytes(), gap(v));
  } else {
    recount_recomputed();
  }
  at_peak = p.predicted.idle_at_peak;
  swap_at_peak = p.predicted.swap_idle_at_peak;
  best = std::move(p);
  return true;
}

Plan Greedy::run() {
  best = finish(in, "mutwo", budget, {});
  if (best.feasible) return best;
  // Updating each parameter as soon as the backward pass is done with it frees
  // its gradient there, at no cost in arithmetic: taken first, unless it raises
  // the peak (the unplanned peak is rarely where gradients are; the lower
  // peaks that recomputation and swapping reach often are).
  if (Plan early = finish(in, "mutwo", budget, {}, {}, true); early.predicted.peak_bytes <= best.predicted.peak_bytes) {
    update_early = true;
    best = std::move(early);
    if (best.feasible) return best;
  }
  at_peak = best.predicted.idle_at_peak;
  swap_at_peak = best.predicted.swap_idle_at_peak;
  for (size_t i = 0; i < cands.size(); ++i) siblings[cands[i].made_by].push_back(i);
  for (size_t step = 0; step < cands.size() + swaps.size(); ++step) {
    double best_ratio = -1;
    const Taken pick = next_pick(best_ratio);
    if (!pick.swap && pick.index == cands.size()) break;
    (pick.swap ? swap_taken : taken)[pick.index] = true;
    chosen.push_back(pick);
    order.push_back({owner(pick), best_ratio, Choice::Outcome::dropped, pick.swap});
    if (try_pick(pick) && best.feasible) return take_back();
  }
  return no_fit();
}

// `best`, the first plan that fits, with choices taken back (kTakeBack).
Plan Greedy::take_back() {
  std::vector<Taken> kept = chosen;
  const size_t first = chosen.size() > kTakeBack ? chosen.size() - kTakeBack : 0;
  for (size_t k = chosen.size(); k-- > first;) {
    std::vector<Taken> without;
    for (const Taken& t : kept)
      if (owner(t) != owner(chosen[k]) || t.swap != chosen[k].swap) without.push_back(t);
    Plan p = plan(without);
    if (!p.feasible || p.predicted.extra_ms >= best.predicted.extra_ms ||
        p.predicted.peak_bytes < best.predicted.peak_bytes)
      continue;
    kept = std::move(without);
    for (Choice& c : order)
      if (c.owner == owner(chosen[k])) c.outcome = Choice::Outcome::taken_back;
    best = std::move(p);
  }
  best.order = std::move(order);
  return std::move(best);
}

// Nothing fits: the lowest peak reached, and why (what to ask for instead is
// infeasible_text's, plan/pipeline.h).
Plan Greedy::no_fit() {
  best.note = fmt::format(
      "the lowest peak the greedy reached is {}, above the budget {} (persistent state alone is {}){}",
      format_bytes(best.predicted.peak_bytes), format_bytes(budget),
      format_bytes(in.profile.persistent_bytes + in.start_extra_bytes),
      swaps.empty() && in.swap && in.host_limit_bytes > 0 && in.h2d_bytes_per_ms <= 0
          ? " (this profile has no copy bandwidth, so nothing was swapped: profile again with this mutwo)"
          : "");
  best.order = std::move(order);
  return std::move(best);
}

Plan greedy(const PlanInput& in, int64_t budget) { return Greedy(in, budget).run(); }

}  // namespace

namespace {

// Is `a` better than `b` by the simulator? The one that fits; of two that fit,
// the one with less predicted extra time; of two that do not, the lower peak.
bool better(const Plan& a, const Plan& b) {
  if (a.feasible != b.feasible) return a.feasible;
  return a.feasible ? a.predicted.extra_ms < b.predicted.extra_ms : a.predicted.peak_bytes < b.predicted.peak_bytes;
}

// The greedy with swapping, and where it finds no plan, the greedy with
// recomputation only too: cheap swaps taken early can leave the peak where
// only recomputation would have lowered it further (GPT-2 small at batch 8 on
// an H100: 4.8 GB against 4.4), so the lower of the two is returned.
Plan greedy_plan(const PlanInput& in, int64_t budget) {
  Plan hybrid = greedy(in, budget);
  if (hybrid.feasible || !in.can_swap()) return hybrid;
  PlanInput recompute_only = in;
  recompute_only.swap = false;
  Plan other = greedy(recompute_only, budget);
  return other.feasible || other.predicted.peak_bytes < hybrid.predicted.peak_bytes ? other : hybrid;
}

// `best`, or per-layer's or sqrt-n's plan (as it is and with early updates)
// where the simulator finds one better; `greedy` says what the greedy found,
// for the note.
Plan with_peers(const PlanInput& in, int64_t budget, Plan best, const std::string& greedy) {
  for (const std::string peer : {"per-layer", "sqrt-n"}) {
    const Plan p = peer == "per-layer" ? plan_per_layer(in, budget) : plan_sqrt_n(in, budget);
    for (bool early : {false, true}) {
      Plan q = finish(in, "mutwo", budget, p.drop, {}, early);
      if (!better(q, best)) continue;
      q.from = peer;
      q.note = fmt::format("took {}'s plan{} ({} at peak {}, {:.3f} ms extra): {}", peer, early ? " with early updates" : "",
                           q.feasible ? "fits" : "does not fit", format_bytes(q.predicted.peak_bytes),
                           q.predicted.extra_ms, greedy);
      best = std::move(q);
    }
  }
  return best;
}

}  // namespace

namespace {

// `in` with its node times replaced by the device rate table's roofline of each
// node's flops and bytes (profile/rates.h) and nominal copy speeds: what the
// floor is searched on, so that it is a property of the graph and not of one
// profile's timings (measured on a busy machine, the same captured step
// planned 9.1 MB and 11.1 MB at "lowest"; docs/planners.md, "The floor is a property of the graph").
PlanInput graph_timed(const PlanInput& in) {
  PlanInput g = in;
  const profile::DeviceRates& rates = profile::device_rates(in.profile.device);
  for (size_t n = 0; n < g.node_ms.size(); ++n) {
    const ir::Node& node = in.graph.nodes()[n];
    const int element = node.outputs.empty() ? 4 : static_cast<int>(ir::element_size(in.graph.type(node.outputs[0]).dtype));
    const profile::NodeRecord& r = in.profile.nodes[n];
    g.node_ms[n] = profile::roofline_ms(rates, r.flops, static_cast<double>(r.bytes_moved), element) + rates.launch_ms;
  }
  if (g.h2d_bytes_per_ms > 0) g.h2d_bytes_per_ms = rates.copy_gbps * 1e6;
  if (g.d2h_bytes_per_ms > 0) g.d2h_bytes_per_ms = rates.copy_gbps * 1e6;
  return g;
}

// The greedy's plan on the graph's own times (graph_timed), judged on `in`.
Plan graph_timed_greedy(const PlanInput& in, int64_t budget) {
  const Plan g = greedy_plan(graph_timed(in), budget);
  Plan p = finish(in, "mutwo", budget, g.drop, g.swap, g.update_early);
  p.from = "the greedy on the graph's own times";
  p.order = g.order;
  return p;
}

}  // namespace

// The greedy's plan, or per-layer's or sqrt-n's where one of those is better
// by the same simulator: the greedy never does worse than the
// layer-wise planners. Each of them is tried as it is and with early updates
// (which the greedy takes too). Where the greedy on the profile's times finds
// nothing that fits, the greedy on the graph's own times is tried too, so that
// every budget at or above the floor (mutwo_floor) fits whatever the timings.
// The candidates do not depend on the budget except the greedy's own, and
// each is judged by `better`, so a smaller budget still never gives a higher
// peak (docs/planners.md).
Plan plan_mutwo(const PlanInput& in, int64_t budget) {
  Plan best = greedy_plan(in, budget);
  if (best.feasible && best.drop.empty() && best.swap.empty()) return best;  // the unplanned step fits
  const std::string greedy = fmt::format("the greedy's {} at peak {}, {:.3f} ms extra",
                                         best.feasible ? "fits" : "does not fit", format_bytes(best.predicted.peak_bytes),
                                         best.predicted.extra_ms);
  if (!best.feasible)
    if (Plan g = graph_timed_greedy(in, budget); better(g, best)) best = std::move(g);
  return with_peers(in, budget, std::move(best), greedy);
}

Plan mutwo_floor(const PlanInput& in, int64_t budget) {
  Plan low = graph_timed_greedy(in, budget);
  const std::string greedy = fmt::format("the greedy's lowest peak on the graph's own times is {}",
                                         format_bytes(low.predicted.peak_bytes));
  return with_peers(in, budget, std::move(low), greedy);
}

}  // namespace mutwo::plan
