// The compiled route's choice across a step's graphs (plan/compiled_step.h):
// every combination where they are few, else μ-TWO's greedy over the
// intervals of the measured steps.
#include "plan/compiled_step.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <tuple>

#include "support/error.h"

namespace mutwo::plan::compiled {

namespace {

using Choice = std::vector<int32_t>;

class Step {
 public:
  explicit Step(const StepProblem& p) : p_(p), intervals_(p.base.size()) {
    for (const StepGraph& g : p.graphs) {
      MUTWO_ASSERT(g.delta.size() == g.ms.size() * intervals_, "solve_step: {} candidates × {} intervals, {} deltas",
                   g.ms.size(), intervals_, g.delta.size());
      MUTWO_ASSERT(!g.allowed.empty(), "solve_step: a graph with no candidate allowed");
      for (int32_t k : g.allowed)
        MUTWO_ASSERT(k >= 0 && static_cast<size_t>(k) < g.ms.size(), "solve_step: candidate {} of {}", k, g.ms.size());
    }
  }

  size_t graphs() const { return p_.graphs.size(); }
  const StepGraph& graph(size_t g) const { return p_.graphs[g]; }
  const int64_t* row(size_t g, int32_t k) const { return p_.graphs[g].delta.data() + static_cast<size_t>(k) * intervals_; }
  double ms(size_t g, int32_t k) const { return p_.graphs[g].ms[static_cast<size_t>(k)]; }

  std::vector<int64_t> peaks(const Choice& c) const {
    std::vector<int64_t> out = p_.base;
    for (size_t g = 0; g < graphs(); ++g) {
      const int64_t* r = row(g, c[g]);
      for (size_t i = 0; i < intervals_; ++i) out[i] += r[i];
    }
    return out;
  }
  static int64_t highest(const std::vector<int64_t>& peaks) {
    return std::max<int64_t>(0, peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end()));
  }
  int64_t peak(const Choice& c) const { return highest(peaks(c)); }
  double cost(const Choice& c) const {
    double total = 0;
    for (size_t g = 0; g < graphs(); ++g) total += ms(g, c[g]);
    return total;
  }

  StepChoice answer(Choice choice, Choice floor, const char* method) const {
    const int64_t at = peak(choice);
    return {choice, at, cost(choice), at <= p_.budget, peak(floor), floor, method};
  }

  StepChoice exhaustive() const {
    Choice at(graphs(), 0), c(graphs()), best, low;
    bool fits = false;
    std::tuple<double, int64_t> best_key;                                // (cost, peak) of the fastest that fits
    std::tuple<int64_t, double> low_key{std::numeric_limits<int64_t>::max(), 0};  // (peak, cost) of the lowest
    for (;;) {
      for (size_t g = 0; g < graphs(); ++g) c[g] = graph(g).allowed[at[g]];
      const int64_t pk = peak(c);
      const double ms = cost(c);
      if (std::tie(pk, ms) < low_key) low_key = {pk, ms}, low = c;
      if (pk <= p_.budget && (!fits || std::tie(ms, pk) < best_key)) fits = true, best_key = {ms, pk}, best = c;
      size_t g = graphs();  // the last graph varies fastest
      while (g > 0 && ++at[g - 1] == static_cast<int32_t>(graph(g - 1).allowed.size())) at[--g] = 0;
      if (g == 0) break;
    }
    return answer(fits ? best : low, low, "exhaustive");
  }

  // Moves off the worst interval until every one fits `limit` (none: down to
  // the floor): the least time per byte taken off it (by_time), else the most bytes.
  Choice lower(Choice c, std::optional<int64_t> limit, bool by_time) const {
    size_t rounds = 0;
    for (size_t g = 0; g < graphs(); ++g) rounds += graph(g).allowed.size() * 4;
    for (size_t round = 0; round < rounds && intervals_ > 0; ++round) {
      const std::vector<int64_t> now = peaks(c);
      const size_t worst = static_cast<size_t>(std::max_element(now.begin(), now.end()) - now.begin());
      if (limit && now[worst] <= *limit) break;
      std::optional<std::pair<size_t, int32_t>> pick;
      std::pair<double, int64_t> pick_score{};
      for (size_t g = 0; g < graphs(); ++g) {
        const int64_t* from = row(g, c[g]);
        for (int32_t k : graph(g).allowed) {
          const int64_t* to = row(g, k);
          const int64_t gain = from[worst] - to[worst];
          if (gain <= 0) continue;
          int64_t moved = std::numeric_limits<int64_t>::min();
          for (size_t i = 0; i < intervals_; ++i) moved = std::max(moved, now[i] - from[i] + to[i]);
          if (moved >= now[worst]) continue;  // moves the peak elsewhere, no lower
          const std::pair<double, int64_t> score{
              by_time ? std::max(ms(g, k) - ms(g, c[g]), 0.0) / static_cast<double>(gain) : 0.0, -gain};
          if (!pick || score < pick_score) pick.emplace(g, k), pick_score = score;
        }
      }
      if (!pick) break;
      c[pick->first] = pick->second;
    }
    return c;
  }

  StepChoice greedy() const {
    Choice c(graphs());
    for (size_t g = 0; g < graphs(); ++g) {  // each graph's fastest, the fewer bytes breaking ties
      auto key = [&](int32_t k) {
        const int64_t* r = row(g, k);
        return std::pair{ms(g, k), intervals_ ? std::max<int64_t>(0, *std::max_element(r, r + intervals_)) : 0};
      };
      c[g] = *std::min_element(graph(g).allowed.begin(), graph(g).allowed.end(),
                               [&](int32_t a, int32_t b) { return key(a) < key(b); });
    }
    c = lower(c, p_.budget, true);
    if (peak(c) <= p_.budget) {  // back to faster candidates where they still fit, the slowest graphs first
      std::vector<size_t> order(graphs());
      std::iota(order.begin(), order.end(), 0);
      auto slowest = [&](size_t g) { return std::max(0.0, *std::max_element(graph(g).ms.begin(), graph(g).ms.end())); };
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slowest(a) > slowest(b); });
      for (size_t g : order) {
        std::vector<int32_t> faster = graph(g).allowed;
        std::stable_sort(faster.begin(), faster.end(), [&](int32_t a, int32_t b) { return ms(g, a) < ms(g, b); });
        for (int32_t k : faster) {
          if (ms(g, k) >= ms(g, c[g])) break;
          Choice trial = c;
          trial[g] = k;
          if (peak(trial) <= p_.budget) {
            c = std::move(trial);
            break;
          }
        }
      }
    }
    return answer(c, lower(c, std::nullopt, false), "greedy");
  }

 private:
  const StepProblem& p_;
  size_t intervals_;
};

}  // namespace

StepChoice solve_step(const StepProblem& p) {
  const Step step(p);
  double combinations = 1;
  for (const StepGraph& g : p.graphs) combinations *= static_cast<double>(g.allowed.size());
  return combinations <= static_cast<double>(p.exhaustive) ? step.exhaustive() : step.greedy();
}

}  // namespace mutwo::plan::compiled
