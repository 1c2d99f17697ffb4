// The optimal planner: Checkmate's MILP (Jain et al., MLSys 2020) restricted to
// mu-TWO's decisions, solved with COIN-OR CBC, to measure how far the greedy is
// from the optimum on small graphs.
//
// Decision space. mu-TWO does not schedule freely as Checkmate does: it keeps
// or drops each candidate (plan.h: a storage group of activations), and the
// rewrite (rewrite/recompute.h) clones every value a backward node needs and
// no longer has, just before that node, once, reusing the clone afterwards.
// So the MILP is over exactly those plans:
//   drop[c]  binary, per candidate (mu-TWO's decision; Checkmate's S = 0
//            between the last forward and the first backward use)
//   A[s,q]   binary, forward node q has been recomputed at or before stage s;
//            stages are the backward nodes that read a candidate, in schedule
//            order. R[s,q] = A[s,q] - A[s-1,q] is Checkmate's R (compute q at
//            stage s), at most once per q as the rewrite does.
// A is pinned to what the rewrite does by lower bounds (a backward read of a
// dropped value, or a clone reading a value not kept, forces its producer)
// and upper bounds (q is new at stage s only if such a read happens at s).
// Objective: sum of q's measured ms over recomputed q: the simulator's extra_ms.
//
// Memory (Checkmate's S for clones and kept values, derived, not free): at
// every node, the unplanned live bytes and workspace, minus each dropped
// storage between its last forward use and its original end, plus each clone
// storage from its stage to its last read, plus each kept storage whose life a
// clone extends past its original end (views followed to the storage they
// share, as liveness does). Between a stage's clones the model counts what is
// live across the stage, the clone's own outputs and workspace, and its
// inputs made at the same stage; it omits clones of that stage that are not
// inputs of the one running. The model therefore never counts more bytes than
// the simulator, for any drop set: it is a relaxation, and the greedy's plan
// (fitting in simulation) is feasible in it, so the optimum is never worse
// than the greedy's.
//
// The answer is then re-simulated with the real rewrite (finish). If the
// simulated peak is over the budget while the MILP thought it fits (the
// omitted intra-stage clones), that drop set is excluded by a no-good cut and
// CBC runs again; the note says how often. A plan that fits in simulation and
// that CBC proves optimal is optimal among all drop sets. Not modelled:
// recomputing a value twice, freeing a clone before its last read, swapping,
// and reordering the schedule (Checkmate's full space): the planner answers
// mu-TWO's question, not Checkmate's. Size is O(stages x recomputable nodes):
// graphs above OptimalOptions::max_columns are refused.
#include "plan/optimal.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <optional>
#include <tuple>

#include "analysis/liveness.h"
#include "ops/op.h"
#include "rewrite/recompute.h"
#include "support/error.h"
#include "support/units.h"

#if MUTWO_WITH_CBC
#include <CbcModel.hpp>
#include <CoinPackedMatrix.hpp>
#include <OsiClpSolverInterface.hpp>
#endif

namespace mutwo::plan {

bool optimal_planner_built() {
#if MUTWO_WITH_CBC
  return true;
#else
  return false;
#endif
}

Plan plan_optimal(const PlanInput& in, int64_t budget) { return plan_optimal(in, budget, OptimalOptions{}); }

#if !MUTWO_WITH_CBC

bool optimal_model_fits(const PlanInput&, int64_t, const std::vector<ir::ValueId>&) { return false; }

Plan plan_optimal(const PlanInput&, int64_t, const OptimalOptions&) {
  MUTWO_FAIL(
      "the optimal planner was built without COIN-OR CBC: install coinor-libcbc-dev (scripts/install-deps.sh) and "
      "configure with -DMUTWO_WITH_CBC=ON, or use --planner mutwo");
}

#else

namespace {

using Clock = std::chrono::steady_clock;
// Value kinds beside a candidate's index, by rewrite::kept_at_backward with nothing dropped:
constexpr int kKept = -1;  // kept at backward time whatever the plan
constexpr int kTemp = -2;  // never kept (a forward temporary): recomputed whenever a clone needs it
constexpr size_t kBehind = 8;  // same-stage clones counted behind a clone's inputs, at most

// A linear expression over LP columns.
struct Lin {
  std::vector<std::pair<int, double>> t;
  double c = 0;
  Lin(double k = 0) : c(k) {}  // NOLINT: constants convert
  static Lin var(int col, double k = 1) {
    Lin l;
    l.t.emplace_back(col, k);
    return l;
  }
  Lin& operator+=(const Lin& o) {
    t.insert(t.end(), o.t.begin(), o.t.end());
    c += o.c;
    return *this;
  }
  Lin operator*(double k) const {
    Lin l = *this;
    for (auto& [col, v] : l.t) v *= k;
    l.c *= k;
    return l;
  }
  Lin operator+(const Lin& o) const { return Lin(*this) += o; }
  Lin operator-(const Lin& o) const { return Lin(*this) += o * -1; }
};

// Rows are kept as "sum >= lo"; CBC gets them as a row-ordered matrix.
struct Lp {
  std::vector<double> lo, hi, cost;
  std::vector<char> integer;
  std::vector<std::vector<std::pair<int, double>>> rows;
  std::vector<double> row_lo;

  int col(double l, double h, bool is_int) {
    lo.push_back(l), hi.push_back(h), cost.push_back(0), integer.push_back(is_int);
    return static_cast<int>(lo.size()) - 1;
  }
  void ge(const Lin& lhs, const Lin& rhs) {  // lhs >= rhs
    Lin e = lhs - rhs;
    std::sort(e.t.begin(), e.t.end());
    std::vector<std::pair<int, double>> merged;
    for (const auto& [col, v] : e.t) {
      if (!merged.empty() && merged.back().first == col) merged.back().second += v;
      else merged.emplace_back(col, v);
    }
    merged.erase(std::remove_if(merged.begin(), merged.end(), [](const auto& p) { return p.second == 0; }),
                 merged.end());
    if (merged.empty()) {
      if (e.c < -1e-9) infeasible_constant = true;  // 0 >= -c fails: no plan meets this row
      return;
    }
    rows.push_back(std::move(merged));
    row_lo.push_back(-e.c);
  }
  bool infeasible_constant = false;
};

using Lits = std::vector<std::pair<int, bool>>;  // (column of drop[c], negated: the literal is 1 - drop[c])

// trigger AND every literal, as its linear lower bound trigger + sum(lits) - n
// (exact for binaries); nullopt when a literal and its negation meet.
std::optional<Lin> conj(const Lin& trigger, Lits lits) {
  std::sort(lits.begin(), lits.end());
  lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
  for (size_t i = 1; i < lits.size(); ++i)
    if (lits[i].first == lits[i - 1].first) return std::nullopt;
  Lin e = trigger;
  for (const auto& [col, neg] : lits) e += neg ? Lin(1) - Lin::var(col) : Lin::var(col);
  e.c -= static_cast<double>(lits.size());
  return e;
}

struct Model {
  Lp lp;
  std::vector<Candidate> cands;
  std::vector<int> dcol;           // per candidate
  std::vector<int32_t> rank;       // per stage: the backward node
  struct Window {
    int first = -1, last = -1, col = -1;
    bool in(int s) const { return first >= 0 && s >= first && s <= last; }
  };
  std::vector<Window> aw;          // per node: the stages where it may be recomputed, and A's columns
  int stages() const { return static_cast<int>(rank.size()); }
  Lin A(int s, int q) const {
    const Window& w = aw[static_cast<size_t>(q)];
    if (w.first < 0 || s < w.first) return Lin(0);
    return Lin::var(w.col + std::min(s, w.last) - w.first);
  }
  Lin R(int s, int q) const { return A(s, q) - A(s - 1, q); }
};

// Builds the MILP (see the top of this file). Memory rows are in units of `unit`
// bytes; `behind` caps the same-stage clones counted behind each clone's inputs.
Model build(const PlanInput& in, int64_t budget, double unit, const OptimalOptions& opt, size_t behind_cap) {
  const ir::Graph& g = in.graph;
  const auto& nodes = g.nodes();
  const size_t nn = nodes.size(), nv = g.num_values();
  ir::UseIndex uses(g);
  analysis::Liveness L = analysis::analyze_liveness(g);
  auto is_fwd = [&](int32_t n) { return ir::is_forward(nodes[size_t(n)].phase); };
  auto is_bwd = [&](int32_t n) { return ir::is_backward(nodes[size_t(n)].phase); };
  auto prod = [&](ir::ValueId v) { return uses.producer[size_t(v)]; };

  Model m;
  Lp& lp = m.lp;
  m.cands = candidates(in);
  std::vector<int> kind(nv, kKept);
  for (size_t c = 0; c < m.cands.size(); ++c) {
    m.dcol.push_back(lp.col(0, 1, true));
    for (ir::ValueId v : m.cands[c].members) kind[size_t(v)] = static_cast<int>(c);
  }
  // Every other value is kept or recomputed whatever the plan, by the rewrite's rule.
  const std::vector<bool> kept = rewrite::kept_at_backward(g, uses, {});
  for (size_t v = 0; v < nv; ++v)
    if (kind[v] < 0) kind[v] = kept[v] ? kKept : kTemp;
  auto nk = [&](ir::ValueId v) { return kind[size_t(v)] >= 0 ? Lin::var(m.dcol[size_t(kind[size_t(v)])]) : Lin(kind[size_t(v)] == kTemp); };

  // Stages, and for every forward node the stages whose recomputation may reach it
  // (all candidates dropped): a stage's closure through values not always kept.
  for (size_t n = 0; n < nn; ++n)
    if (is_bwd(int32_t(n)) && std::any_of(nodes[n].inputs.begin(), nodes[n].inputs.end(),
                                          [&](ir::ValueId a) { return a != ir::kNoValue && kind[size_t(a)] >= 0; }))
      m.rank.push_back(int32_t(n));
  m.aw.assign(nn, {});
  std::vector<int> seen(nn, -1), stack;
  for (int s = 0; s < m.stages(); ++s) {
    for (ir::ValueId a : nodes[size_t(m.rank[size_t(s)])].inputs)
      if (a != ir::kNoValue && kind[size_t(a)] >= 0) stack.push_back(prod(a));
    while (!stack.empty()) {
      int q = stack.back();
      stack.pop_back();
      if (seen[size_t(q)] == s) continue;
      seen[size_t(q)] = s;
      Model::Window& w = m.aw[size_t(q)];
      if (w.first < 0) w.first = s;
      w.last = s;
      for (ir::ValueId a : nodes[size_t(q)].inputs)
        if (a != ir::kNoValue && kind[size_t(a)] != kKept) stack.push_back(prod(a));
    }
  }
  int64_t a_cols = 0;
  for (const auto& w : m.aw) a_cols += w.first < 0 ? 0 : w.last - w.first + 1;
  MUTWO_CHECK(a_cols * 4 <= opt.max_columns,
              "graph {} is too large for the optimal planner: {} nodes, {} candidates and {} stage-node pairs "
              "(limit {}); use --planner mutwo, or a smaller model",
              g.name, nn, m.cands.size(), a_cols, opt.max_columns / 4);
  for (size_t q = 0; q < nn; ++q) {
    Model::Window& w = m.aw[q];
    if (w.first < 0) continue;
    // Stage closures cross values not kept only, so never a node the rewrite may not repeat.
    MUTWO_ASSERT(ops::recomputable(nodes[q]), "the optimal planner's model recomputes {}", ops::display_name(nodes[q]));
    w.col = static_cast<int>(lp.lo.size());
    for (int s = w.first; s <= w.last; ++s) lp.col(0, 1, true);
    lp.cost[size_t(w.col + w.last - w.first)] = 1e3 * std::max(0.0, in.node_ms[q]);  // us: CBC's cutoff increment is absolute
  }

  // A: lower bounds (reads force recomputation) and upper bounds (and nothing else does).
  std::vector<std::vector<Lin>> just(nn);
  for (size_t q = 0; q < nn; ++q)
    if (m.aw[q].first >= 0) just[q].resize(size_t(m.aw[q].last - m.aw[q].first + 1));
  auto justify = [&](int q, int s, const Lin& e) { just[size_t(q)][size_t(s - m.aw[size_t(q)].first)] += e; };
  for (int s = 0; s < m.stages(); ++s)
    for (ir::ValueId a : nodes[size_t(m.rank[size_t(s)])].inputs)
      if (a != ir::kNoValue && kind[size_t(a)] >= 0) {
        lp.ge(m.A(s, prod(a)), nk(a));
        justify(prod(a), s, nk(a));
      }
  for (size_t qi = 0; qi < nn; ++qi) {
    const Model::Window& w = m.aw[qi];
    const int q = int(qi);
    for (int s = w.first; w.first >= 0 && s <= w.last; ++s)
      for (ir::ValueId a : nodes[qi].inputs) {
        if (a == ir::kNoValue || kind[size_t(a)] == kKept) continue;
        MUTWO_ASSERT(m.aw[size_t(prod(a))].in(s), "stage closure misses the producer of %{}", g.value(a).name);
        lp.ge(m.A(s, prod(a)), m.A(s, q) + nk(a) - 1);
        if (kind[size_t(a)] == kTemp) {
          justify(prod(a), s, m.A(s, q));
        } else {
          int wc = lp.col(0, 1, false);
          lp.ge(m.A(s, q), Lin::var(wc));
          lp.ge(nk(a), Lin::var(wc));
          justify(prod(a), s, Lin::var(wc));
        }
      }
  }
  for (size_t q = 0; q < nn; ++q)
    for (int s = m.aw[q].first; m.aw[q].first >= 0 && s <= m.aw[q].last; ++s) {
      lp.ge(m.A(s, int(q)), m.A(s - 1, int(q)));
      lp.ge(m.A(s - 1, int(q)) + just[q][size_t(s - m.aw[q].first)], m.A(s, int(q)));
    }

  // Reads of storages: a backward node or a clone reads value a; follow views to
  // the storage serving it: a kept original (maybe past its end), or a clone root.
  enum Type { kNodeRead, kCloneRead, kExtRead };
  struct Event {
    int s;
    Type type;
    ir::ValueId v;  // clone root, or the original storage's owner
    Lin cond;
    int reader;     // the recomputed node, -1 for a backward node
  };
  std::vector<Event> events;
  auto walk = [&](ir::ValueId a, int s, const Lin& trig, int reader) {
    Lits lits;
    for (ir::ValueId v = a; v != ir::kNoValue;) {
      int32_t p = prod(v);
      if (p < 0 || !is_fwd(p)) return;
      ir::ValueId owner = L.storage[size_t(v)];
      int k = kind[size_t(v)];
      if (k != kTemp) {  // kept (maybe): served by the original storage
        if (reader >= 0 && L.def[size_t(owner)] >= 0 && L.storage_end[size_t(owner)] < m.rank[size_t(s)]) {
          Lits kl = lits;
          if (k >= 0) kl.emplace_back(m.dcol[size_t(k)], true);
          if (auto c = conj(trig, kl)) events.push_back({s, kExtRead, owner, *c, reader});
        }
        if (k == kKept) return;
        lits.emplace_back(m.dcol[size_t(k)], false);
      }
      if (owner == v) {
        if (auto c = conj(trig, lits)) events.push_back({s, reader >= 0 ? kCloneRead : kNodeRead, v, *c, reader});
        return;
      }
      v = nodes[size_t(p)].inputs[0];
    }
  };
  for (int s = 0; s < m.stages(); ++s)
    for (ir::ValueId a : nodes[size_t(m.rank[size_t(s)])].inputs)
      if (a != ir::kNoValue && kind[size_t(a)] >= 0) walk(a, s, Lin(1), -1);
  for (size_t q = 0; q < nn; ++q) {
    bool view = ops::has(nodes[q], ops::kView);  // its input 0 is read through its output's reads
    for (int s = m.aw[q].first; m.aw[q].first >= 0 && s <= m.aw[q].last; ++s)
      for (size_t i = view ? 1 : 0; i < nodes[q].inputs.size(); ++i)
        if (nodes[q].inputs[i] != ir::kNoValue) walk(nodes[q].inputs[i], s, m.R(s, int(q)), int(q));
  }

  // Liveness of clones (from their stage to their last read) and of extended
  // originals: "read at stage >= s" columns, before (C) and at (N) the node.
  struct Fut {
    int first = -1, last = -1, c = -1;  // columns: FutC, FutN, alive at node, alive across the stage's clones
  };
  std::vector<Fut> clone_fut(nv), ext_fut(nv);
  for (const Event& e : events) {
    bool ext = e.type == kExtRead;
    Fut& f = (ext ? ext_fut : clone_fut)[size_t(e.v)];
    MUTWO_ASSERT(ext || m.aw[size_t(prod(e.v))].first >= 0, "%{} is read as a clone but never recomputed",
                 g.value(e.v).name);
    if (f.first < 0) {
      f.first = ext ? int(std::upper_bound(m.rank.begin(), m.rank.end(), L.storage_end[size_t(e.v)]) - m.rank.begin())
                    : m.aw[size_t(prod(e.v))].first;
      f.last = e.s;
    }
    f.last = std::max(f.last, e.s);
  }
  auto fcol = [](const Fut& f, int s, int which) { return Lin::var(f.c + 4 * (s - f.first) + which); };
  const int ns = m.stages();
  std::vector<std::vector<std::pair<int, double>>> at_node(ns), across(ns);  // (column, bytes)
  std::vector<std::vector<std::tuple<int, double, int32_t>>> ext_across(ns);  // (column, bytes, original end)
  for (size_t v = 0; v < nv; ++v)
    for (bool ext : {false, true}) {
      Fut& f = (ext ? ext_fut : clone_fut)[v];
      if (f.first < 0) continue;
      f.c = int(lp.lo.size());
      double bytes = double(g.type(ir::ValueId(v)).bytes()) / unit;
      for (int s = f.first; s <= f.last; ++s)
        for (int k = 0; k < 4; ++k) lp.col(0, 1, false);
      for (int s = f.first; s <= f.last; ++s) {
        lp.ge(fcol(f, s, 0), fcol(f, s, 1));
        if (s < f.last) lp.ge(fcol(f, s, 1), fcol(f, s + 1, 0));
        if (ext) {  // past its original end: alive iff read later
          lp.ge(fcol(f, s, 2), fcol(f, s, 1));
          lp.ge(fcol(f, s, 3), fcol(f, s, 0));
          ext_across[size_t(s)].emplace_back(f.c + 4 * (s - f.first) + 3, bytes, L.storage_end[v]);
        } else {    // a clone: alive iff made by now and read later
          lp.ge(fcol(f, s, 2), m.A(s, prod(ir::ValueId(v))) + fcol(f, s, 1) - 1);
          lp.ge(fcol(f, s, 3), m.A(s - 1, prod(ir::ValueId(v))) + fcol(f, s, 0) - 1);
          across[size_t(s)].emplace_back(f.c + 4 * (s - f.first) + 3, bytes);
        }
        at_node[size_t(s)].emplace_back(f.c + 4 * (s - f.first) + 2, bytes);
      }
    }
  // Between a stage's clones: X[s] >= each clone's outputs, workspace and same-stage inputs.
  std::vector<int> xcol(size_t(ns), -1);
  std::vector<std::vector<Lin>> clone_mem(nn);
  for (size_t q = 0; q < nn; ++q) {
    if (m.aw[q].first < 0) continue;
    clone_mem[q].resize(size_t(m.aw[q].last - m.aw[q].first + 1));
    double out = 0;
    for (ir::ValueId o : nodes[q].outputs)
      if (L.owns_storage(o)) out += double(g.type(o).bytes());
    for (int s = m.aw[q].first; s <= m.aw[q].last; ++s)
      clone_mem[q][size_t(s - m.aw[q].first)] = m.R(s, int(q)) * ((out + double(in.workspace[q])) / unit);
  }
  for (Event& e : events) {
    if (e.type == kNodeRead) lp.ge(fcol(clone_fut[size_t(e.v)], e.s, 1), e.cond);
    if (e.type == kExtRead) lp.ge(fcol(ext_fut[size_t(e.v)], e.s, 0), e.cond);
    if (e.type != kCloneRead) continue;
    lp.ge(fcol(clone_fut[size_t(e.v)], e.s, 0), e.cond);
    int made_here = lp.col(0, 1, false);
    lp.ge(Lin::var(made_here), e.cond - m.A(e.s - 1, prod(e.v)));
    clone_mem[size_t(e.reader)][size_t(e.s - m.aw[size_t(e.reader)].first)] +=
        Lin::var(made_here, double(g.type(e.v).bytes()) / unit);
  }
  // Clones of this stage that the clone's recursion made before it (roots
  // behind its inputs, through values not kept) and that live past the stage.
  for (size_t q = 0; q < nn; ++q) {
    if (m.aw[q].first < 0) continue;
    std::vector<std::pair<ir::ValueId, Lits>> todo, behind;
    for (ir::ValueId a : nodes[q].inputs)
      if (a != ir::kNoValue && kind[size_t(a)] != kKept) todo.push_back({a, kind[size_t(a)] >= 0 ? Lits{{m.dcol[size_t(kind[size_t(a)])], false}} : Lits{}});
    while (!todo.empty() && behind.size() < behind_cap) {
      auto [t, lits] = todo.back();
      todo.pop_back();
      for (ir::ValueId b : nodes[size_t(prod(t))].inputs) {
        if (b == ir::kNoValue || kind[size_t(b)] == kKept || !L.owns_storage(b)) continue;
        if (std::find(nodes[q].inputs.begin(), nodes[q].inputs.end(), b) != nodes[q].inputs.end()) continue;
        if (std::none_of(behind.begin(), behind.end(), [&](const auto& e) { return e.first == b; })) behind.push_back({b, lits});
        Lits more = lits;
        if (kind[size_t(b)] >= 0) more.emplace_back(m.dcol[size_t(kind[size_t(b)])], false);
        todo.push_back({b, more});
      }
    }
    for (const auto& [v, lits] : behind) {
      const Fut& f = clone_fut[size_t(v)];
      for (int s = std::max(m.aw[q].first, f.first); f.first >= 0 && s <= std::min(m.aw[q].last, f.last); ++s)
        if (auto c = conj(m.R(s, int(q)) + m.R(s, prod(v)) + fcol(f, s, 1) - 2, lits)) {
          int z = lp.col(0, 1, false);
          lp.ge(Lin::var(z), *c);
          clone_mem[q][size_t(s - m.aw[q].first)] += Lin::var(z, double(g.type(v).bytes()) / unit);
        }
    }
  }
  for (size_t q = 0; q < nn; ++q)
    for (int s = m.aw[q].first; m.aw[q].first >= 0 && s <= m.aw[q].last; ++s) {
      if (xcol[size_t(s)] < 0) xcol[size_t(s)] = lp.col(0, 1e30, false);
      lp.ge(Lin::var(xcol[size_t(s)]), clone_mem[q][size_t(s - m.aw[q].first)]);
    }

  // Dropped storages: freed after their last forward use instead of their end.
  struct Saving {
    int col;
    int32_t from, to;  // saved at nodes in (from, to]
    double bytes;
  };
  std::vector<Saving> savings;
  std::vector<int32_t> fend(nv, -1);
  for (size_t v = 0; v < nv; ++v) {
    int32_t last = L.last_use[v];
    if (kind[v] >= 0) {  // a member: its backward reads go to clones
      last = L.def[v];
      for (int32_t u : uses.users[v])
        if (is_fwd(u)) last = std::max(last, u);
    }
    auto& f = fend[size_t(L.storage[v])];
    f = std::max(f, last);
  }
  for (size_t c = 0; c < m.cands.size(); ++c) {
    auto o = size_t(m.cands[c].owner);
    if (fend[o] < L.storage_end[o]) savings.push_back({m.dcol[c], fend[o], L.storage_end[o], double(m.cands[c].bytes) / unit});
  }

  // Memory rows: every node, and the clones before every stage.
  const double cap = double(budget) / unit;
  auto row = [&](Lin mem) {
    double most = mem.c;
    for (const auto& [col, v] : mem.t) most += std::max(0.0, v);
    if (most > cap + 1e-9) lp.ge(Lin(cap), mem);
  };
  int next = 0;  // the first stage at or after node n
  for (size_t n = 0; n < nn; ++n) {
    auto r = int32_t(n);
    while (next < ns && m.rank[size_t(next)] < r) ++next;
    Lin mem(double(L.live_during[n] + in.workspace[n] + in.start_extra_bytes) / unit);
    for (const Saving& sv : savings)
      if (sv.from < r && r <= sv.to) mem += Lin::var(sv.col, -sv.bytes);
    if (next < ns && m.rank[size_t(next)] == r) {
      for (const auto& [col, b] : at_node[size_t(next)]) mem += Lin::var(col, b);
    } else if (is_bwd(r) && next < ns) {  // between stages: what was made before and is read after
      for (const auto& [col, b] : across[size_t(next)]) mem += Lin::var(col, b);
      for (const auto& [col, b, end] : ext_across[size_t(next)])
        if (end < r) mem += Lin::var(col, b);
    }
    row(mem);
  }
  for (int s = 0; s < ns; ++s) {
    if (xcol[size_t(s)] < 0) continue;
    int32_t r = m.rank[size_t(s)];
    Lin mem(double(L.live_before[size_t(r)] + in.start_extra_bytes) / unit);
    for (const Saving& sv : savings)
      if (sv.from < r && r <= sv.to) mem += Lin::var(sv.col, -sv.bytes);
    for (const auto& [col, b] : across[size_t(s)]) mem += Lin::var(col, b);
    for (const auto& [col, b, end] : ext_across[size_t(s)]) mem += Lin::var(col, b);
    mem += Lin::var(xcol[size_t(s)]);
    row(mem);
  }
  MUTWO_CHECK(int64_t(lp.lo.size()) <= opt.max_columns,
              "graph {} is too large for the optimal planner: its MILP has {} variables (limit {}); use --planner mutwo",
              g.name, lp.lo.size(), opt.max_columns);
  return m;
}

struct Solved {
  bool solution = false, optimal = false, infeasible = false;
  double obj = 0, bound = 0;
  std::vector<double> x;
};

// CBC's standard driver (preprocessing, cuts, heuristics), from `start` when given.
Solved solve(const Lp& lp, double seconds, const std::vector<double>* start) {
  const int nc = static_cast<int>(lp.lo.size()), nr = static_cast<int>(lp.rows.size());
  std::vector<CoinBigIndex> starts{0};
  std::vector<int> cols, lens;
  std::vector<double> vals, row_hi(size_t(nr), COIN_DBL_MAX);
  for (const auto& r : lp.rows) {
    for (const auto& [c, v] : r) cols.push_back(c), vals.push_back(v);
    lens.push_back(static_cast<int>(r.size()));
    starts.push_back(static_cast<CoinBigIndex>(cols.size()));
  }
  CoinPackedMatrix matrix(false, nc, nr, static_cast<CoinBigIndex>(vals.size()), vals.data(), cols.data(),
                          starts.data(), lens.data());
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, lp.lo.data(), lp.hi.data(), lp.cost.data(), lp.row_lo.data(), row_hi.data());
  for (int c = 0; c < nc; ++c)
    if (lp.integer[size_t(c)]) solver.setInteger(c);
  CbcModel model(solver);
  model.setLogLevel(0);
  if (start) {
    double obj = 0;
    for (int c = 0; c < nc; ++c) obj += lp.cost[size_t(c)] * (*start)[size_t(c)];
    model.setBestSolution(start->data(), nc, obj, true);
  }
  CbcMain0(model);
  const std::string secs = fmt::format("{:.3f}", std::max(0.01, seconds));
  const char* argv[] = {"mutwo", "-log", "0", "-timeMode", "elapsed", "-seconds", secs.c_str(), "-solve", "-quit"};
  const auto t0 = Clock::now();
  CbcMain1(static_cast<int>(std::size(argv)), argv, model);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  // A finished search is a proof (an infeasible relaxation under the incumbent's
  // cutoff included), except when time ran out: CBC stopped inside
  // preprocessing can report a finished search.
  const bool finished = model.status() == 0 && took < 0.95 * seconds;
  Solved out;
  out.infeasible = finished && !model.bestSolution();
  if (model.bestSolution()) {
    out.solution = true;
    out.x.assign(model.bestSolution(), model.bestSolution() + nc);
    out.obj = model.getObjValue();
    out.optimal = finished;
    out.bound = finished ? out.obj : std::min(out.obj, model.getBestPossibleObjValue());
  }
  return out;
}

std::vector<ir::ValueId> drops_of(const Model& m, const std::vector<double>& x) {
  std::vector<ir::ValueId> drop;
  for (size_t c = 0; c < m.cands.size(); ++c)
    if (x[size_t(m.dcol[c])] > 0.5) drop.insert(drop.end(), m.cands[c].members.begin(), m.cands[c].members.end());
  std::sort(drop.begin(), drop.end());
  return drop;
}

// The model with drop[] fixed to a drop list.
Lp with_drops(const Model& m, const PlanInput& in, const std::vector<ir::ValueId>& drop) {
  Lp fixed = m.lp;
  std::vector<bool> chosen(in.graph.num_values(), false);
  for (ir::ValueId v : drop) chosen[size_t(v)] = true;
  for (size_t c = 0; c < m.cands.size(); ++c)
    fixed.lo[size_t(m.dcol[c])] = fixed.hi[size_t(m.dcol[c])] = chosen[size_t(m.cands[c].members[0])] ? 1 : 0;
  return fixed;
}

}  // namespace

bool optimal_model_fits(const PlanInput& in, int64_t budget, const std::vector<ir::ValueId>& drop) {
  Model m = build(in, budget, std::max(1.0, double(budget) / 1e6), OptimalOptions{}, kBehind);
  return !m.lp.infeasible_constant && solve(with_drops(m, in, drop), 60, nullptr).solution;
}

namespace {

enum class Outcome { fits, infeasible, unknown };

// The optimal plan at `budget`. When no drop set fits and `lowest` is set, the
// plan shown is the one with the lowest peak any drop set reaches, found by
// bisection on the budget, so that a smaller budget never shows a higher peak.
Plan optimal_at(const PlanInput& in, int64_t budget, const OptimalOptions& opt, bool lowest, Outcome* outcome) {
  *outcome = Outcome::unknown;
  const auto t0 = Clock::now();
  auto left = [&] { return opt.time_limit_s - std::chrono::duration<double>(Clock::now() - t0).count(); };
  Plan none = finish(in, "optimal", budget, {});
  if (none.feasible) {
    none.note = "fits without recomputation";
    *outcome = Outcome::fits;
    return none;
  }
  Plan greedy = plan_mutwo(in, budget);
  const double unit = std::max(1.0, double(budget) / 1e6);
  // First without the same-stage clones behind a clone's inputs (a smaller
  // model, usually exact enough); with them from the first mismatch on.
  Model m = build(in, budget, unit, opt, 0);
  std::vector<std::string> notes;
  std::vector<double> start;
  auto warm_start = [&] {  // the greedy's plan, the rest of the model solved around it
    start.clear();
    if (!opt.warm_start || !greedy.feasible || m.lp.infeasible_constant) return;
    Solved w = solve(with_drops(m, in, greedy.drop), std::min(left(), 0.25 * opt.time_limit_s), nullptr);
    if (w.solution) start = w.x;
    if (w.infeasible) notes.push_back("warning: the model rejects the greedy's plan, which fits in simulation (a modelling bug)");
  };
  warm_start();

  // Solve; a drop set the model accepts but the simulator puts over budget is
  // excluded (a no-good cut on drop[]) and CBC runs again.
  Plan best;
  bool have = false;
  int excluded = 0;
  Solved last;
  std::vector<Lin> cuts;
  while (!m.lp.infeasible_constant) {
    last = solve(m.lp, left(), start.empty() ? nullptr : &start);
    if (!last.solution) break;
    Plan p = finish(in, "optimal", budget, drops_of(m, last.x));
    if (p.feasible) {
      best = std::move(p);
      have = true;
      break;
    }
    ++excluded;
    Lin cut;  // drop[] columns come first, so cuts carry over to a rebuilt model
    for (size_t c = 0; c < m.cands.size(); ++c)
      cut += last.x[size_t(m.dcol[c])] > 0.5 ? Lin(1) - Lin::var(m.dcol[c]) : Lin::var(m.dcol[c]);
    cuts.push_back(cut);
    if (excluded == 1) {
      m = build(in, budget, unit, opt, kBehind);
      warm_start();
      for (size_t k = 0; k + 1 < cuts.size(); ++k) m.lp.ge(cuts[k], Lin(1));
    }
    m.lp.ge(cut, Lin(1));
    if (left() <= 0) break;
  }
  const std::string size = fmt::format("{} variables, {} constraints, {} stages", m.lp.lo.size(), m.lp.rows.size(), m.stages());
  if (excluded)
    notes.push_back(fmt::format("{} MILP answer(s) fit the model but not the simulator (the model omits some clones "
                                "within a stage): excluded and solved again",
                                excluded));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string why_stopped = left() <= 0 ? fmt::format("stopped at the time limit ({:g} s)", opt.time_limit_s)
                                              : std::string("CBC stopped without a proof");
  if (have) {
    if (last.optimal)
      notes.insert(notes.begin(), fmt::format("proven optimal by CBC in {:.2f} s ({})", secs, size));
    else
      notes.insert(notes.begin(), fmt::format("{}, gap {:.1f}% ({})", why_stopped,
                                              last.obj > 1e-12 ? 100 * (last.obj - last.bound) / last.obj : 0.0, size));
    best.note = fmt::format("{}", fmt::join(notes, "; "));
    *outcome = Outcome::fits;
    return best;
  }
  // No plan that fits: proven by the model, or time ran out.
  Plan p = finish(in, "optimal", budget, greedy.drop);
  if (last.solution) {  // the last answer fits the model, not the simulator, and time is up
    p = finish(in, "optimal", budget, drops_of(m, last.x));
    notes.insert(notes.begin(), fmt::format("the MILP thought its plan fits {} but it simulates to {} (over budget)",
                                            format_bytes(budget), format_bytes(p.predicted.peak_bytes)));
  } else if (m.lp.infeasible_constant || last.infeasible) {
    *outcome = Outcome::infeasible;
    // Bisect between this budget (no drop set fits) and the lowest peak known;
    // each plan that fits lowers the upper end to its simulated peak. The
    // probes alternate between one byte under the lowest peak known (usually
    // the answer) and the middle.
    int64_t lo = budget;
    bool proven = lowest, first = true;
    while (lowest && p.predicted.peak_bytes - lo > 1) {
      OptimalOptions o = opt;
      o.time_limit_s = left();
      Outcome at_mid = Outcome::unknown;
      const int64_t mid = first ? p.predicted.peak_bytes - 1 : lo + (p.predicted.peak_bytes - lo) / 2;
      first = !first;
      Plan q = o.time_limit_s > 0 ? optimal_at(in, mid, o, false, &at_mid) : Plan{};
      if (at_mid == Outcome::fits) p = finish(in, "optimal", budget, q.drop);
      else if (at_mid == Outcome::infeasible) lo = mid;
      else {
        proven = false;
        break;
      }
    }
    notes.insert(notes.begin(),
                 fmt::format("no drop set fits {}: the MILP is infeasible, so no recomputation plan fits (persistent "
                             "state alone is {}); shown: {}, {}",
                             format_bytes(budget), format_bytes(in.profile.persistent_bytes + in.start_extra_bytes),
                             proven ? "the lowest peak any drop set reaches"
                                    : lowest ? "the lowest peak found before the time limit" : "the greedy's lowest peak",
                             format_bytes(p.predicted.peak_bytes)));
  } else {
    notes.insert(notes.begin(), fmt::format("{} before CBC found a plan that fits; gap unknown; shown: the greedy's plan",
                                            why_stopped));
  }
  p.note = fmt::format("{} ({})", fmt::join(notes, "; "), size);
  return p;
}

}  // namespace

Plan plan_optimal(const PlanInput& in, int64_t budget, const OptimalOptions& opt) {
  Outcome outcome;
  return optimal_at(in, budget, opt, true, &outcome);
}

#endif  // MUTWO_WITH_CBC

}  // namespace mutwo::plan
