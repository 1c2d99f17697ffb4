// The optimal planner's model (see optimal_model.h): Checkmate's MILP (Jain
// et al., MLSys 2020) restricted to mu-TWO's decisions.
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
// What is kept is the rewrite's own rule (rewrite::kept_at_backward).
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
// Swapping (where PlanInput::can_swap): swap[k] binary per storage
// rewrite::swappable accepts, at most one of drop and swap per storage, the
// swapped bytes within the host limit. A swapped storage is gone from the
// device from the first node starting after its copy out is done to the
// swap_in the rewrite places for its first read after the gap
// (rewrite::prefetch_point); optimizer state also from its write-back to the
// step's end. A clone reading a swapped storage inside its gap ends the
// saving at that clone's prefetch point (a column per such stage, at most the
// one before it). Copies run in line (the CPU): the windows and the copy time
// (all of it, in the objective) are the simulator's. Copies on CUDA's streams
// (CopyQueues): each stream a queue in the rewrite's order, times shifted by
// the recomputation before each node (Shift), a window's uncertain ends tied
// to the queue by binary columns, and one stall column (the objective's copy
// time) at least what the queues force. Relaxed where the rewrite is not
// followed: copies for the optimizer each alone on the stream and due at its
// end (the rewrite splits it into buckets), a clone's prefetch point without
// the queue, and every wait counted before every copy out: on the memory side
// the model stays a relaxation (tests/core/test_plan_optimal.cpp checks random
// plans against the simulator). Its copy time is an estimate (the queues
// ignore the waits they cause downstream), so for plans with swaps on CUDA,
// CBC's proof is about the model, and optimal.cpp compares the answer with
// the greedy's in simulation.
//
// Not modelled: recomputing a value twice, freeing a clone before its last
// read, and reordering the schedule (Checkmate's full space): the planner
// answers mu-TWO's question, not Checkmate's. Size is O(stages x recomputable
// nodes): graphs above OptimalOptions::max_columns are refused.
#include "plan/optimal_model.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "analysis/liveness.h"
#include "ops/attrs.h"
#include "ops/op.h"
#include "plan/optimal_swaps.h"
#include "rewrite/recompute.h"
#include "rewrite/swap.h"
#include "rewrite/update_early.h"
#include "support/error.h"

namespace mutwo::plan {

using milp::Lin;

namespace {

// Value kinds beside a candidate's index, by rewrite::kept_at_backward with nothing dropped:
constexpr int kKept = -1;  // kept at backward time whatever the plan
constexpr int kTemp = -2;  // never kept (a forward temporary): recomputed whenever a clone needs it
// Each read-later record has four columns per stage: read at this stage or
// later (before, and at, the node), alive at the node, alive across the stage's clones.
constexpr int kReadLaterColumns = 4;
// Refused before the memory rows are built: the model grows about this many
// columns per recompute column (A[s,q]), a guess checked again at the end.
constexpr int64_t kColumnsPerRecomputeColumn = 4;

using Lits = std::vector<std::pair<int, bool>>;  // (column of drop[c], negated: the literal is 1 - drop[c])

// trigger AND every literal, as its linear lower bound trigger + sum(lits) - n
// (exact for binaries); nullopt when a literal and its negation meet.
std::optional<Lin> conjunction(const Lin& trigger, Lits lits) {
  std::sort(lits.begin(), lits.end());
  lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
  for (size_t i = 1; i < lits.size(); ++i)
    if (lits[i].first == lits[i - 1].first) return std::nullopt;
  Lin e = trigger;
  for (const auto& [col, neg] : lits) e += neg ? Lin(1) - Lin::var(col) : Lin::var(col);
  e.c -= static_cast<double>(lits.size());
  return e;
}

}  // namespace

PlanInput model_input(const PlanInput& in, bool update_early) {
  if (!update_early) return in;
  rewrite::Rewritten r = rewrite::update_early(rewrite::insert_recomputation(in.graph, {}));
  PlanInput out = in;
  out.graph = std::move(r.graph);
  out.node_ms.clear();
  out.workspace.clear();
  for (size_t n = 0; n < r.origin.size(); ++n) {
    const auto o = static_cast<size_t>(r.origin[n]);
    out.node_ms.push_back(in.node_ms[o] * r.share_of(n));
    out.workspace.push_back(in.workspace[o]);
  }
  return out;
}

namespace {

// Reads of storages: a backward node or a clone reads value a; follow views to
// the storage serving it: a kept original (maybe past its end), or a clone root.
enum ReadType { kNodeRead, kCloneRead, kExtRead };
struct Event {
  int s;
  ReadType type;
  ir::ValueId v;  // clone root, or the original storage's owner
  Lin cond;
  int reader;     // the recomputed node, -1 for a backward node
};
// A clone reading a swapped storage inside its gap: the copy comes back for it.
struct SwapRead {
  int swap, s;
  Lin cond;
};
// Liveness of clones (from their stage to their last read) and of extended
// originals: "read at stage >= s" columns, before (C) and at (N) the node.
struct ReadLater {
  int first = -1, last = -1, c = -1;  // columns: FutC, FutN, alive at node, alive across the stage's clones
};
Lin read_later(const ReadLater& f, int s, int which) { return Lin::var(f.c + kReadLaterColumns * (s - f.first) + which); }
// A dropped storage, freed after its last forward use instead of its end.
struct Saving {
  int col;
  int32_t from, to;  // saved at nodes in (from, to]
  double bytes;
};

// The program being built: one method per family of columns and rows, called
// in this order by build_optimal_model (columns are numbered as they are made,
// so the order is part of the model).
class ModelBuilder {
 public:
  ModelBuilder(const PlanInput& in, int64_t budget, double bytes_per_unit, const OptimalOptions& options,
               size_t max_clones_behind, OptimalModel& m)
      : in(in), budget(budget), bytes_per_unit(bytes_per_unit), options(options), max_clones_behind(max_clones_behind),
        g(in.graph), nodes(g.nodes()), nn(nodes.size()), nv(g.num_values()), uses(g), L(analysis::analyze_liveness(g)),
        m(m), lp(m.lp) {}

  void decisions();
  void stages();
  void recompute_bounds();
  void reads();
  void read_later_columns();
  void clone_peaks();
  void drop_savings();
  void swap_savings();
  void memory_rows();

 private:
  bool is_fwd(int32_t n) const { return ir::is_forward(nodes[size_t(n)].phase); }
  bool is_bwd(int32_t n) const { return ir::is_backward(nodes[size_t(n)].phase); }
  int32_t producer(ir::ValueId v) const { return uses.producer[size_t(v)]; }
  // 1 when v is not there at backward time: drop[c] for a candidate's member, 1 for a temporary, 0 if kept.
  Lin not_kept(ir::ValueId v) const {
    return kind[size_t(v)] >= 0 ? Lin::var(m.drop_col[size_t(kind[size_t(v)])]) : Lin(kind[size_t(v)] == kTemp);
  }
  void walk(ir::ValueId a, int s, const Lin& trig, int reader);
  std::vector<std::pair<ir::ValueId, Lits>> clones_behind(size_t q) const;

  const PlanInput& in;
  const int64_t budget;
  const double bytes_per_unit;
  const OptimalOptions& options;
  const size_t max_clones_behind;
  const ir::Graph& g;
  const std::vector<ir::Node>& nodes;
  const size_t nn, nv;
  ir::UseIndex uses;
  analysis::Liveness L;
  OptimalModel& m;
  milp::Lp& lp;

  std::vector<int> kind;         // per value: its candidate's index, kKept or kTemp
  std::vector<double> start;     // when each node starts, nodes back to back
  std::vector<int> swap_index;   // per value: its index in m.swaps, or -1
  std::vector<SwapWindow> windows;
  std::vector<Event> events;
  std::vector<SwapRead> swap_reads;
  std::vector<ReadLater> clone_fut, ext_fut;
  std::vector<std::vector<std::pair<int, double>>> at_node, across;           // per stage: (column, bytes)
  std::vector<std::vector<std::tuple<int, double, int32_t>>> ext_across;      // per stage: (column, bytes, original end)
  std::vector<int> clone_peak;   // per stage: the column X[s], or -1
  std::vector<std::vector<Lin>> clone_mem;
  std::vector<Saving> savings;
  std::vector<std::vector<std::pair<int, double>>> swap_saved, swap_saved_clones;  // (column, units) freed
};

// Drop columns, then swap columns (they follow the drop columns, so cuts on
// both carry over), and every value's kind.
void ModelBuilder::decisions() {
  m.cands = candidates(in);
  kind.assign(nv, kKept);
  for (size_t c = 0; c < m.cands.size(); ++c) {
    m.drop_col.push_back(lp.col(0, 1, true));
    for (ir::ValueId v : m.cands[c].members) kind[size_t(v)] = static_cast<int>(c);
  }
  start.assign(nn + 1, 0);
  for (size_t n = 0; n < nn; ++n) start[n + 1] = start[n] + std::max(0.0, in.node_ms[n]);
  swap_index.assign(nv, -1);
  if (in.can_swap()) {
    const std::vector<rewrite::Gap> gaps = rewrite::swap_gaps(g, L);
    for (ir::ValueId o : swap_candidates(in)) {
      const rewrite::Gap& gap = gaps[size_t(o)];
      SwapWindow w = swap_window(in, start, gap, g.type(o).bytes(), !ops::optimizer_lists(nodes[size_t(gap.after)]).empty());
      if (w.freed >= w.back && w.freed_again >= int32_t(nn)) continue;  // its copies leave no node without it
      swap_index[size_t(o)] = static_cast<int>(m.swaps.size());
      m.swaps.push_back(o);
      m.swap_col.push_back(lp.col(0, 1, true));
      windows.push_back(w);
    }
  }
  // Every other value is kept or recomputed whatever the plan, by the rewrite's rule.
  const std::vector<bool> kept = rewrite::kept_at_backward(g, uses, {});
  for (size_t v = 0; v < nv; ++v)
    if (kind[v] < 0) kind[v] = kept[v] ? kKept : kTemp;
}

// Stages, and for every forward node the stages whose recomputation may reach it
// (all candidates dropped): a stage's closure through values not always kept.
// Then the A columns, the size check, and the objective.
void ModelBuilder::stages() {
  for (size_t n = 0; n < nn; ++n)
    if (is_bwd(int32_t(n)) && std::any_of(nodes[n].inputs.begin(), nodes[n].inputs.end(),
                                          [&](ir::ValueId a) { return a != ir::kNoValue && kind[size_t(a)] >= 0; }))
      m.stage_node.push_back(int32_t(n));
  m.window.assign(nn, {});
  std::vector<int> seen(nn, -1), stack;
  for (int s = 0; s < m.stages(); ++s) {
    for (ir::ValueId a : nodes[size_t(m.stage_node[size_t(s)])].inputs)
      if (a != ir::kNoValue && kind[size_t(a)] >= 0) stack.push_back(producer(a));
    while (!stack.empty()) {
      int q = stack.back();
      stack.pop_back();
      if (seen[size_t(q)] == s) continue;
      seen[size_t(q)] = s;
      OptimalModel::Window& w = m.window[size_t(q)];
      if (w.first < 0) w.first = s;
      w.last = s;
      for (ir::ValueId a : nodes[size_t(q)].inputs)
        if (a != ir::kNoValue && kind[size_t(a)] != kKept) stack.push_back(producer(a));
    }
  }
  int64_t recompute_columns = 0;
  for (const auto& w : m.window) recompute_columns += w.first < 0 ? 0 : w.last - w.first + 1;
  MUTWO_CHECK(recompute_columns * kColumnsPerRecomputeColumn <= options.max_columns,
              "graph {} is too large for the optimal planner: {} nodes, {} candidates and {} stage-node pairs "
              "(limit {}); use --planner mutwo, or a smaller model",
              g.name, nn, m.cands.size(), recompute_columns, options.max_columns / kColumnsPerRecomputeColumn);
  for (size_t q = 0; q < nn; ++q) {
    OptimalModel::Window& w = m.window[q];
    if (w.first < 0) continue;
    // Stage closures cross values not kept only, so never a node the rewrite may not repeat.
    MUTWO_ASSERT(ops::recomputable(nodes[q]), "the optimal planner's model recomputes {}", ops::display_name(nodes[q]));
    w.col = static_cast<int>(lp.columns());
    for (int s = w.first; s <= w.last; ++s) lp.col(0, 1, true);
    lp.cost[size_t(w.col + w.last - w.first)] = kCostPerMs * std::max(0.0, in.node_ms[q]);
  }
}

// A: lower bounds (reads force recomputation) and upper bounds (and nothing else does).
void ModelBuilder::recompute_bounds() {
  std::vector<std::vector<Lin>> reasons(nn);
  for (size_t q = 0; q < nn; ++q)
    if (m.window[q].first >= 0) reasons[q].resize(size_t(m.window[q].last - m.window[q].first + 1));
  auto add_reason = [&](int q, int s, const Lin& e) { reasons[size_t(q)][size_t(s - m.window[size_t(q)].first)] += e; };
  for (int s = 0; s < m.stages(); ++s)
    for (ir::ValueId a : nodes[size_t(m.stage_node[size_t(s)])].inputs)
      if (a != ir::kNoValue && kind[size_t(a)] >= 0) {
        lp.ge(m.A(s, producer(a)), not_kept(a));
        add_reason(producer(a), s, not_kept(a));
      }
  for (size_t qi = 0; qi < nn; ++qi) {
    const OptimalModel::Window& w = m.window[qi];
    const int q = int(qi);
    for (int s = w.first; w.first >= 0 && s <= w.last; ++s)
      for (ir::ValueId a : nodes[qi].inputs) {
        if (a == ir::kNoValue || kind[size_t(a)] == kKept) continue;
        MUTWO_ASSERT(m.window[size_t(producer(a))].in(s), "stage closure misses the producer of %{}", g.value(a).name);
        lp.ge(m.A(s, producer(a)), m.A(s, q) + not_kept(a) - 1);
        if (kind[size_t(a)] == kTemp) {
          add_reason(producer(a), s, m.A(s, q));
        } else {
          int wc = lp.col(0, 1, false);
          lp.ge(m.A(s, q), Lin::var(wc));
          lp.ge(not_kept(a), Lin::var(wc));
          add_reason(producer(a), s, Lin::var(wc));
        }
      }
  }
  for (size_t q = 0; q < nn; ++q)
    for (int s = m.window[q].first; m.window[q].first >= 0 && s <= m.window[q].last; ++s) {
      lp.ge(m.A(s, int(q)), m.A(s - 1, int(q)));
      lp.ge(m.A(s - 1, int(q)) + reasons[q][size_t(s - m.window[q].first)], m.A(s, int(q)));
    }
}

// Value a read at stage s (by a backward node, reader -1, or by the clone of
// node `reader`, when trig holds): the events of the storages that serve it.
void ModelBuilder::walk(ir::ValueId a, int s, const Lin& trig, int reader) {
  Lits lits;
  for (ir::ValueId v = a; v != ir::kNoValue;) {
    int32_t p = producer(v);
    if (p < 0 || !is_fwd(p)) return;
    ir::ValueId owner = L.storage[size_t(v)];
    int k = kind[size_t(v)];
    if (k != kTemp) {  // kept (maybe): served by the original storage
      Lits kl = lits;
      if (k >= 0) kl.emplace_back(m.drop_col[size_t(k)], true);
      if (reader >= 0 && L.def[size_t(owner)] >= 0 && L.storage_end[size_t(owner)] < m.stage_node[size_t(s)]) {
        if (auto c = conjunction(trig, kl)) events.push_back({s, kExtRead, owner, *c, reader});
      }
      // A clone reading a swapped storage inside its gap: the copy comes back for it.
      if (const int w = swap_index[size_t(owner)]; reader >= 0 && w >= 0 && m.stage_node[size_t(s)] < windows[size_t(w)].read)
        if (auto c = conjunction(trig, kl)) swap_reads.push_back({w, s, *c});
      if (k == kKept) return;
      lits.emplace_back(m.drop_col[size_t(k)], false);
    }
    if (owner == v) {
      if (auto c = conjunction(trig, lits)) events.push_back({s, reader >= 0 ? kCloneRead : kNodeRead, v, *c, reader});
      return;
    }
    v = nodes[size_t(p)].inputs[0];
  }
}

// Reads of storages by every stage's backward node and every clone.
void ModelBuilder::reads() {
  for (int s = 0; s < m.stages(); ++s)
    for (ir::ValueId a : nodes[size_t(m.stage_node[size_t(s)])].inputs)
      if (a != ir::kNoValue && kind[size_t(a)] >= 0) walk(a, s, Lin(1), -1);
  for (size_t q = 0; q < nn; ++q) {
    bool view = ops::has(nodes[q], ops::kView);  // its input 0 is read through its output's reads
    for (int s = m.window[q].first; m.window[q].first >= 0 && s <= m.window[q].last; ++s)
      for (size_t i = view ? 1 : 0; i < nodes[q].inputs.size(); ++i)
        if (nodes[q].inputs[i] != ir::kNoValue) walk(nodes[q].inputs[i], s, m.R(s, int(q)), int(q));
  }
}

// Liveness of clones (from their stage to their last read) and of extended
// originals: "read at stage >= s" columns, before (C) and at (N) the node.
void ModelBuilder::read_later_columns() {
  clone_fut.assign(nv, {});
  ext_fut.assign(nv, {});
  for (const Event& e : events) {
    bool ext = e.type == kExtRead;
    ReadLater& f = (ext ? ext_fut : clone_fut)[size_t(e.v)];
    MUTWO_ASSERT(ext || m.window[size_t(producer(e.v))].first >= 0, "%{} is read as a clone but never recomputed",
                 g.value(e.v).name);
    if (f.first < 0) {
      f.first = ext ? int(std::upper_bound(m.stage_node.begin(), m.stage_node.end(), L.storage_end[size_t(e.v)]) - m.stage_node.begin())
                    : m.window[size_t(producer(e.v))].first;
      f.last = e.s;
    }
    f.last = std::max(f.last, e.s);
  }
  const auto num_stages = size_t(m.stages());
  at_node.assign(num_stages, {});
  across.assign(num_stages, {});
  ext_across.assign(num_stages, {});
  for (size_t v = 0; v < nv; ++v)
    for (bool ext : {false, true}) {
      ReadLater& f = (ext ? ext_fut : clone_fut)[v];
      if (f.first < 0) continue;
      f.c = int(lp.columns());
      double bytes = double(g.type(ir::ValueId(v)).bytes()) / bytes_per_unit;
      for (int s = f.first; s <= f.last; ++s)
        for (int k = 0; k < kReadLaterColumns; ++k) lp.col(0, 1, false);
      for (int s = f.first; s <= f.last; ++s) {
        lp.ge(read_later(f, s, 0), read_later(f, s, 1));
        if (s < f.last) lp.ge(read_later(f, s, 1), read_later(f, s + 1, 0));
        if (ext) {  // past its original end: alive iff read later
          lp.ge(read_later(f, s, 2), read_later(f, s, 1));
          lp.ge(read_later(f, s, 3), read_later(f, s, 0));
          ext_across[size_t(s)].emplace_back(f.c + kReadLaterColumns * (s - f.first) + 3, bytes, L.storage_end[v]);
        } else {    // a clone: alive iff made by now and read later
          lp.ge(read_later(f, s, 2), m.A(s, producer(ir::ValueId(v))) + read_later(f, s, 1) - 1);
          lp.ge(read_later(f, s, 3), m.A(s - 1, producer(ir::ValueId(v))) + read_later(f, s, 0) - 1);
          across[size_t(s)].emplace_back(f.c + kReadLaterColumns * (s - f.first) + 3, bytes);
        }
        at_node[size_t(s)].emplace_back(f.c + kReadLaterColumns * (s - f.first) + 2, bytes);
      }
    }
}

// Clones of node q's stage that its recursion made before it (roots behind its
// inputs, through values not kept), at most max_clones_behind, each with the
// literals under which it is a clone.
std::vector<std::pair<ir::ValueId, Lits>> ModelBuilder::clones_behind(size_t q) const {
  std::vector<std::pair<ir::ValueId, Lits>> todo, behind;
  for (ir::ValueId a : nodes[q].inputs)
    if (a != ir::kNoValue && kind[size_t(a)] != kKept) todo.push_back({a, kind[size_t(a)] >= 0 ? Lits{{m.drop_col[size_t(kind[size_t(a)])], false}} : Lits{}});
  while (!todo.empty() && behind.size() < max_clones_behind) {
    auto [t, lits] = todo.back();
    todo.pop_back();
    for (ir::ValueId b : nodes[size_t(producer(t))].inputs) {
      if (b == ir::kNoValue || kind[size_t(b)] == kKept || !L.owns_storage(b)) continue;
      if (std::find(nodes[q].inputs.begin(), nodes[q].inputs.end(), b) != nodes[q].inputs.end()) continue;
      if (std::none_of(behind.begin(), behind.end(), [&](const auto& e) { return e.first == b; })) behind.push_back({b, lits});
      Lits more = lits;
      if (kind[size_t(b)] >= 0) more.emplace_back(m.drop_col[size_t(kind[size_t(b)])], false);
      todo.push_back({b, more});
    }
  }
  return behind;
}

// Between a stage's clones: X[s] >= each clone's outputs, workspace and same-stage inputs.
void ModelBuilder::clone_peaks() {
  clone_peak.assign(size_t(m.stages()), -1);
  clone_mem.assign(nn, {});
  for (size_t q = 0; q < nn; ++q) {
    if (m.window[q].first < 0) continue;
    clone_mem[q].resize(size_t(m.window[q].last - m.window[q].first + 1));
    double out = 0;
    for (ir::ValueId o : nodes[q].outputs)
      if (L.owns_storage(o)) out += double(g.type(o).bytes());
    for (int s = m.window[q].first; s <= m.window[q].last; ++s)
      clone_mem[q][size_t(s - m.window[q].first)] = m.R(s, int(q)) * ((out + double(in.workspace[q])) / bytes_per_unit);
  }
  for (Event& e : events) {
    if (e.type == kNodeRead) lp.ge(read_later(clone_fut[size_t(e.v)], e.s, 1), e.cond);
    if (e.type == kExtRead) lp.ge(read_later(ext_fut[size_t(e.v)], e.s, 0), e.cond);
    if (e.type != kCloneRead) continue;
    lp.ge(read_later(clone_fut[size_t(e.v)], e.s, 0), e.cond);
    int made_here = lp.col(0, 1, false);
    lp.ge(Lin::var(made_here), e.cond - m.A(e.s - 1, producer(e.v)));
    clone_mem[size_t(e.reader)][size_t(e.s - m.window[size_t(e.reader)].first)] +=
        Lin::var(made_here, double(g.type(e.v).bytes()) / bytes_per_unit);
  }
  // Clones of this stage that the clone's recursion made before it and that live past the stage.
  for (size_t q = 0; q < nn; ++q) {
    if (m.window[q].first < 0) continue;
    for (const auto& [v, lits] : clones_behind(q)) {
      const ReadLater& f = clone_fut[size_t(v)];
      for (int s = std::max(m.window[q].first, f.first); f.first >= 0 && s <= std::min(m.window[q].last, f.last); ++s)
        if (auto c = conjunction(m.R(s, int(q)) + m.R(s, producer(v)) + read_later(f, s, 1) - 2, lits)) {
          int z = lp.col(0, 1, false);
          lp.ge(Lin::var(z), *c);
          clone_mem[q][size_t(s - m.window[q].first)] += Lin::var(z, double(g.type(v).bytes()) / bytes_per_unit);
        }
    }
  }
  for (size_t q = 0; q < nn; ++q)
    for (int s = m.window[q].first; m.window[q].first >= 0 && s <= m.window[q].last; ++s) {
      if (clone_peak[size_t(s)] < 0) clone_peak[size_t(s)] = lp.col(0, milp::kUnbounded, false);
      lp.ge(Lin::var(clone_peak[size_t(s)]), clone_mem[q][size_t(s - m.window[q].first)]);
    }
}

// Dropped storages: freed after their last forward use instead of their end.
void ModelBuilder::drop_savings() {
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
    if (fend[o] < L.storage_end[o]) savings.push_back({m.drop_col[c], fend[o], L.storage_end[o], double(m.cands[c].bytes) / bytes_per_unit});
  }
}

// Swapped storages: gone from the device between their copies. A clone
// reading one inside its gap (swap_reads, by stage) brings it back from
// that stage's prefetch point on: saving[i] <= saving[i-1], and 0 once a
// read at the i-th such stage happens. On CUDA the copies queue on their
// streams (optimal_swaps.h: CopyQueues), so near its ends a window holds
// only when the queue's times allow it. Then the host limit and the copy time.
void ModelBuilder::swap_savings() {
  std::sort(swap_reads.begin(), swap_reads.end(), [](const SwapRead& a, const SwapRead& b) {
    return std::tie(a.swap, a.s) < std::tie(b.swap, b.s);
  });
  const CopyQueues queues =
      copy_queues(lp, m, windows, start, in.copies_overlap, recompute_shift(lp, m, in, in.copies_overlap && !m.swaps.empty()));
  swap_saved.assign(nn, {});
  swap_saved_clones.assign(size_t(m.stages()), {});
  std::vector<int> stage_at(nn, -1);
  for (int s = 0; s < m.stages(); ++s) stage_at[size_t(m.stage_node[size_t(s)])] = s;
  for (size_t k = 0, e = 0; k < m.swaps.size(); ++k) {
    const SwapWindow& w = windows[k];
    const double units = double(g.type(m.swaps[k]).bytes()) / bytes_per_unit;
    auto save = [&](int32_t from, int32_t to, int col) {
      for (int32_t r = from; r < to; ++r) {
        swap_saved[size_t(r)].emplace_back(queues.saving(lp, k, r, col, false), units);
        if (const int s = stage_at[size_t(r)]; s >= 0 && clone_peak[size_t(s)] >= 0)
          swap_saved_clones[size_t(s)].emplace_back(queues.saving(lp, k, r, col, true), units);
      }
    };
    int col = m.swap_col[k];
    int32_t from = w.freed;
    while (e < swap_reads.size() && swap_reads[e].swap == int(k)) {
      const int s = swap_reads[e].s;
      const int32_t node = m.stage_node[size_t(s)];
      const int32_t back = std::max(from, std::min(back_point(in, start, w, start[size_t(node)], node), w.back));
      save(from, back, col);
      from = back;
      const int next = lp.col(0, 1, false);
      lp.ge(Lin::var(col), Lin::var(next));
      for (; e < swap_reads.size() && swap_reads[e].swap == int(k) && swap_reads[e].s == s; ++e)
        lp.ge(Lin(1), Lin::var(next) + swap_reads[e].cond);
      col = next;
    }
    save(from, std::max(w.back, queues.back_most[k]), col);
    save(w.freed_again, int32_t(nn), m.swap_col[k]);
  }
  // At most one of drop and swap per storage; the host holds every swapped storage.
  Lin host;
  for (size_t c = 0; c < m.cands.size(); ++c)
    if (const int k = swap_index[size_t(m.cands[c].owner)]; k >= 0)
      lp.ge(Lin(1), Lin::var(m.drop_col[c]) + Lin::var(m.swap_col[size_t(k)]));
  for (size_t k = 0; k < m.swaps.size(); ++k) host += Lin::var(m.swap_col[k], double(g.type(m.swaps[k]).bytes()) / bytes_per_unit);
  if (!m.swaps.empty()) lp.ge(Lin(double(in.host_limit_bytes) / bytes_per_unit), host);
  // Copy time in line: all of it (on CUDA: the queues' stall, copy_queues).
  if (!in.copies_overlap)
    for (size_t k = 0; k < m.swaps.size(); ++k)
      lp.cost[size_t(m.swap_col[k])] += kCostPerMs * (windows[k].out_ms + windows[k].in_ms);
}

// Memory rows: every node, and the clones before every stage.
void ModelBuilder::memory_rows() {
  const double cap = double(budget) / bytes_per_unit;
  auto row = [&](Lin mem) {
    double most = mem.c;
    for (const auto& [col, v] : mem.t) most += std::max(0.0, v);
    if (most > cap + milp::kConstantRowTolerance) lp.ge(Lin(cap), mem);
  };
  const int num_stages = m.stages();
  int next = 0;  // the first stage at or after node n
  for (size_t n = 0; n < nn; ++n) {
    auto r = int32_t(n);
    while (next < num_stages && m.stage_node[size_t(next)] < r) ++next;
    Lin mem(double(L.live_during[n] + in.workspace[n] + in.start_extra_bytes) / bytes_per_unit);
    for (const Saving& sv : savings)
      if (sv.from < r && r <= sv.to) mem += Lin::var(sv.col, -sv.bytes);
    for (const auto& [col, units] : swap_saved[n]) mem += Lin::var(col, -units);
    if (next < num_stages && m.stage_node[size_t(next)] == r) {
      for (const auto& [col, b] : at_node[size_t(next)]) mem += Lin::var(col, b);
    } else if (is_bwd(r) && next < num_stages) {  // between stages: what was made before and is read after
      for (const auto& [col, b] : across[size_t(next)]) mem += Lin::var(col, b);
      for (const auto& [col, b, end] : ext_across[size_t(next)])
        if (end < r) mem += Lin::var(col, b);
    }
    row(mem);
  }
  for (int s = 0; s < num_stages; ++s) {
    if (clone_peak[size_t(s)] < 0) continue;
    int32_t r = m.stage_node[size_t(s)];
    Lin mem(double(L.live_before[size_t(r)] + in.start_extra_bytes) / bytes_per_unit);
    for (const Saving& sv : savings)
      if (sv.from < r && r <= sv.to) mem += Lin::var(sv.col, -sv.bytes);
    for (const auto& [col, units] : swap_saved_clones[size_t(s)]) mem += Lin::var(col, -units);
    for (const auto& [col, b] : across[size_t(s)]) mem += Lin::var(col, b);
    for (const auto& [col, b, end] : ext_across[size_t(s)]) mem += Lin::var(col, b);
    mem += Lin::var(clone_peak[size_t(s)]);
    row(mem);
  }
}

}  // namespace

OptimalModel build_optimal_model(const PlanInput& in, int64_t budget, double bytes_per_unit,
                                 const OptimalOptions& options, size_t max_clones_behind) {
  OptimalModel m;
  ModelBuilder b(in, budget, bytes_per_unit, options, max_clones_behind, m);
  b.decisions();
  b.stages();
  b.recompute_bounds();
  b.reads();
  b.read_later_columns();
  b.clone_peaks();
  b.drop_savings();
  b.swap_savings();
  b.memory_rows();
  MUTWO_CHECK(int64_t(m.lp.columns()) <= options.max_columns,
              "graph {} is too large for the optimal planner: its MILP has {} variables (limit {}); use --planner mutwo",
              in.graph.name, m.lp.columns(), options.max_columns);
  return m;
}

std::vector<ir::ValueId> drops_of(const OptimalModel& m, const std::vector<double>& x) {
  std::vector<ir::ValueId> drop;
  for (size_t c = 0; c < m.cands.size(); ++c)
    if (x[size_t(m.drop_col[c])] > 0.5) drop.insert(drop.end(), m.cands[c].members.begin(), m.cands[c].members.end());
  std::sort(drop.begin(), drop.end());
  return drop;
}

std::vector<ir::ValueId> swaps_of(const OptimalModel& m, const std::vector<double>& x) {
  std::vector<ir::ValueId> swap;
  for (size_t k = 0; k < m.swaps.size(); ++k)
    if (x[size_t(m.swap_col[k])] > 0.5) swap.push_back(m.swaps[k]);
  return swap;
}

milp::Lp with_plan(const OptimalModel& m, const PlanInput& in, const std::vector<ir::ValueId>& drop,
                   const std::vector<ir::ValueId>& swap) {
  milp::Lp fixed = m.lp;
  std::vector<bool> chosen(in.graph.num_values(), false), swapped(in.graph.num_values(), false);
  for (ir::ValueId v : drop) chosen[size_t(v)] = true;
  for (ir::ValueId v : swap) swapped[size_t(v)] = true;
  for (size_t c = 0; c < m.cands.size(); ++c)
    fixed.lo[size_t(m.drop_col[c])] = fixed.hi[size_t(m.drop_col[c])] = chosen[size_t(m.cands[c].members[0])] ? 1 : 0;
  // (A swap without a column saves no byte at any node: nothing the model counts.)
  for (size_t k = 0; k < m.swaps.size(); ++k)
    fixed.lo[size_t(m.swap_col[k])] = fixed.hi[size_t(m.swap_col[k])] = swapped[size_t(m.swaps[k])] ? 1 : 0;
  return fixed;
}

}  // namespace mutwo::plan
