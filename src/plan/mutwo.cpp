// The mu-TWO greedy (Purandare et al., MLSys 2023, Appendix A; recompute only):
// repeatedly drop the candidate freeing the most bytes per millisecond of
// extra recomputation, re-simulating the whole schedule after every choice,
// until the simulated peak fits the budget. As in Capuchin, which mu-TWO
// adapts, only candidates idle at the current peak are eligible (live there,
// with their last forward read before it and their next backward read after
// it): dropping anything else costs time and cannot lower the peak. (Live at
// the peak was the rule until the fused loss made the logits' last forward
// read the peak node: dropping them bought BERT-base 3.7 ms of recomputed
// vocabulary projection and no byte at the peak.) A choice that raises the
// simulated peak (its recomputation brings back more than it frees) is undone
// and the candidate kept, so the simulated peak never rises along the way.
#include <algorithm>
#include <limits>
#include <unordered_map>

#include "plan/plan.h"
#include "rewrite/recompute.h"
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

// The first plan that fits may overshoot the budget: its last choices freed
// more than was still missing. Take back choices, latest (least bytes per ms)
// first, where the plan still fits and gets cheaper and its peak does not fall
// (so sweeps stay monotone: see docs/planners.md). Only the last kTakeBack
// choices are tried, one simulation each: the overshoot comes from the last
// picks (on transformer-lm every accepted take-back was among the last 4; on
// bert-large at batch 32 none of 264 trials was accepted, at half the planning time).
constexpr size_t kTakeBack = 16;
// Choices taken back are marked so in `order` (by owner).
Plan take_back(const PlanInput& in, Plan best, const std::vector<Candidate>& cands, const std::vector<size_t>& chosen,
               std::vector<Choice>& order) {
  std::vector<size_t> kept_choices(chosen);
  const size_t first = chosen.size() > kTakeBack ? chosen.size() - kTakeBack : 0;
  for (size_t k = chosen.size(); k-- > first;) {
    std::vector<ir::ValueId> drop;
    for (size_t c : kept_choices)
      if (c != chosen[k]) drop.insert(drop.end(), cands[c].members.begin(), cands[c].members.end());
    Plan p = finish(in, "mutwo", best.budget_bytes, std::move(drop));
    if (!p.feasible || p.predicted.extra_ms >= best.predicted.extra_ms ||
        p.predicted.peak_bytes < best.predicted.peak_bytes)
      continue;
    kept_choices.erase(std::find(kept_choices.begin(), kept_choices.end(), chosen[k]));
    for (Choice& c : order)
      if (c.owner == cands[chosen[k]].owner) c.outcome = Choice::Outcome::taken_back;
    best = std::move(p);
  }
  best.order = std::move(order);
  return best;
}

}  // namespace

Plan plan_mutwo(const PlanInput& in, int64_t budget) {
  std::vector<Candidate> cands = candidates(in);
  std::vector<bool> taken(cands.size(), false);
  std::vector<bool> recomputed(in.graph.nodes().size(), false);  // nodes some chosen candidate recomputes
  std::vector<ir::ValueId> drop;
  std::vector<size_t> chosen;
  std::vector<Choice> order;  // every pick, undone ones included: the reasoning plan.json records
  Closures closures(in);
  uint32_t stamp = 0;

  Plan best = finish(in, "mutwo", budget, {});
  if (best.feasible) return best;
  std::vector<bool> at_peak = best.predicted.idle_at_peak;
  // Candidates made by one node (a split's query, key and value) share one
  // recompute subgraph: the first of them pays for all, so it is scored with
  // the bytes of its eligible siblings too, and they follow it for free.
  std::unordered_map<int32_t, std::vector<size_t>> siblings;  // by the node making them
  for (size_t i = 0; i < cands.size(); ++i) siblings[cands[i].made_by].push_back(i);
  std::vector<int32_t> sub;
  for (size_t step = 0; step < cands.size(); ++step) {
    // argmax of bytes freed per ms of recomputation not already paid for.
    size_t pick = cands.size();
    double best_ratio = -1;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (taken[i] || !at_peak[static_cast<size_t>(cands[i].owner)]) continue;
      sub.clear();
      closures.subgraph(cands[i], ++stamp, sub);
      double ms = closures.ms_outside(sub, recomputed);
      int64_t bytes = 0;
      for (size_t j : siblings[cands[i].made_by])
        if (!taken[j] && at_peak[static_cast<size_t>(cands[j].owner)]) bytes += cands[j].bytes;
      double ratio = static_cast<double>(bytes) / std::max(ms, 1e-6);
      if (ratio > best_ratio) {
        best_ratio = ratio;
        pick = i;
      }
    }
    if (pick == cands.size()) break;
    taken[pick] = true;
    chosen.push_back(pick);
    order.push_back({cands[pick].owner, best_ratio, Choice::Outcome::dropped});
    closures.drop(cands[pick]);
    drop.insert(drop.end(), cands[pick].members.begin(), cands[pick].members.end());
    // Re-simulate the real schedule, recomputation included (Algorithm G).
    Plan p = finish(in, "mutwo", budget, drop);
    if (p.predicted.peak_bytes > best.predicted.peak_bytes) {
      // Its recomputation costs more memory where the peak now is than it
      // frees: keep it (decided once; the sequence of choices stays the same
      // for every budget, so a smaller budget still extends a larger one's plan).
      closures.keep(cands[pick]);
      drop.resize(drop.size() - cands[pick].members.size());
      chosen.pop_back();
      order.back().outcome = Choice::Outcome::raised_peak;
      continue;
    }
    // Dropping this one may lengthen the subgraphs of those chosen before (Algorithm E).
    std::fill(recomputed.begin(), recomputed.end(), false);
    ++stamp;
    for (size_t c : chosen) {
      sub.clear();
      closures.subgraph(cands[c], stamp, sub);
      for (int32_t n : sub) recomputed[static_cast<size_t>(n)] = true;
    }
    at_peak = p.predicted.idle_at_peak;
    best = std::move(p);
    if (best.feasible) return take_back(in, std::move(best), cands, chosen, order);
  }
  best.note = fmt::format(
      "no plan fits {}: the lowest peak the greedy reached is {} (persistent state alone is {}); "
      "try a larger budget or a smaller batch",
      format_bytes(budget), format_bytes(best.predicted.peak_bytes),
      format_bytes(in.profile.persistent_bytes + in.start_extra_bytes));
  best.order = std::move(order);
  return best;
}

}  // namespace mutwo::plan
