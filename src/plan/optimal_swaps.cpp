// The optimal planner's model of swapping (see optimal_swaps.h).
#include "plan/optimal_swaps.h"

#include <algorithm>
#include <functional>
#include <tuple>

namespace mutwo::plan {

using milp::Lin;

SwapWindow swap_window(const PlanInput& in, const std::vector<double>& start, const rewrite::Gap& gap, int64_t bytes,
                       bool read_by_optimizer) {
  const auto nn = static_cast<int32_t>(start.size() - 1);
  SwapWindow w;
  w.before = gap.before, w.read = gap.after;
  w.out_ms = static_cast<double>(bytes) / in.d2h_bytes_per_ms;
  w.in_ms = static_cast<double>(bytes) / in.h2d_bytes_per_ms;
  // The first node from `from` on that starts once a copy out begun at `from` is done.
  auto after_copy_out = [&](int32_t from) {
    if (!in.copies_overlap) return from;
    const double done = start[static_cast<size_t>(from)] + w.out_ms;
    return static_cast<int32_t>(std::lower_bound(start.begin() + from, start.end() - 1, done) - start.begin());
  };
  w.freed = gap.before < 0 ? 0 : after_copy_out(gap.before + 1);
  w.by_optimizer = read_by_optimizer;
  w.land_by = start[static_cast<size_t>(gap.after) + (read_by_optimizer ? 1 : 0)];
  w.back = back_point(in, start, w, w.land_by, gap.after);
  w.freed_again = gap.before < 0 ? after_copy_out(gap.after + 1) : nn;  // state: written back after its update
  return w;
}

int32_t back_point(const PlanInput& in, const std::vector<double>& start, const SwapWindow& w, double land_by,
                   int32_t read) {
  return in.copies_overlap ? rewrite::prefetch_point(start, land_by, w.in_ms, w.before, read) : read;
}

Shift recompute_shift(milp::Lp& lp, const OptimalModel& m, const PlanInput& in, bool wanted) {
  Shift shift;
  const int stages = m.stages();
  if (!wanted || stages == 0) return shift;
  const size_t nn = in.graph.nodes().size();
  std::vector<int> t_col(static_cast<size_t>(stages));
  std::vector<double> t_most(static_cast<size_t>(stages), 0.0);
  for (int s = 0; s < stages; ++s) {
    t_col[size_t(s)] = lp.col(0, milp::kUnbounded, false);
    Lin sum;
    for (size_t q = 0; q < nn; ++q)
      if (m.window[q].first >= 0 && m.window[q].first <= s) {
        sum += m.A(s, int(q)) * std::max(0.0, in.node_ms[q]);
        t_most[size_t(s)] += std::max(0.0, in.node_ms[q]);
      }
    lp.ge(Lin::var(t_col[size_t(s)]), sum);
    lp.ge(sum, Lin::var(t_col[size_t(s)]));
  }
  shift.col.assign(nn + 1, -1);
  shift.before.assign(nn + 1, -1);
  shift.most.assign(nn + 1, 0);
  for (size_t n = 0; n <= nn; ++n) {
    const auto s = std::upper_bound(m.stage_node.begin(), m.stage_node.end(), int32_t(n)) - m.stage_node.begin() - 1;
    const auto b = std::lower_bound(m.stage_node.begin(), m.stage_node.end(), int32_t(n)) - m.stage_node.begin() - 1;
    if (s >= 0) shift.col[n] = t_col[size_t(s)], shift.most[n] = t_most[size_t(s)];
    if (b >= 0) shift.before[n] = t_col[size_t(b)];
  }
  return shift;
}

int CopyQueues::saving(milp::Lp& lp, size_t k, int32_t r, int col, bool clones) const {
  if (ends.empty()) return col;
  const Ends& q = ends[k];
  const SwapWindow& w = windows[k];
  auto tie_done = [&](int d, double most) {  // D <= r's start (waits before it included: at most all) when set
    const double big = most - start[size_t(r)];
    const int y = lp.col(0, 1, true);
    lp.ge(Lin::var(col), Lin::var(y));
    lp.ge(at(r) + Lin::var(stall) + big, Lin::var(d) + Lin::var(y, big));
    col = y;
  };
  if (r >= w.freed && r < q.freed_until && w.before >= 0) tie_done(q.done, q.done_most);
  if (r >= w.freed_again && r < q.freed_again_until) tie_done(q.again_done, q.again_most);
  // P >= r's end when set; for the clones, the start of the first (a relaxation).
  const Lin end = clones ? Lin(start[size_t(r)]) + shift.at_clones(r) : at(r + 1);
  const double big = start[size_t(r) + (clones ? 0 : 1)] + shift.most_at(r + 1) - q.begin_least;
  if (r >= q.back_from && r < back_most[k] && big > 0) {
    const int z = lp.col(0, 1, true);
    lp.ge(Lin::var(col), Lin::var(z));
    lp.ge(Lin::var(q.begin) + big, Lin::var(z, big) + end);
    col = z;
  }
  return col;
}

CopyQueues copy_queues(milp::Lp& lp, const OptimalModel& m, const std::vector<SwapWindow>& windows,
                       const std::vector<double>& start, bool overlap, Shift shift) {
  CopyQueues q;
  q.start = start;
  q.windows = windows;
  q.shift = std::move(shift);
  for (const SwapWindow& w : windows) q.back_most.push_back(w.back);
  if (!overlap || m.swaps.empty()) return q;
  const size_t ns = m.swaps.size();
  const auto nn = static_cast<int32_t>(start.size() - 1);
  q.ends.resize(ns);
  auto first_at_or_after = [&](int32_t from, double t) {
    return static_cast<int32_t>(std::lower_bound(start.begin() + from, start.end() - 1, t) - start.begin());
  };
  const int stall = q.stall = lp.col(0, milp::kUnbounded, false);
  lp.cost[size_t(stall)] = kCostPerMs;
  // To the host: (issue node, swap, is the state's write-back), in issue order.
  std::vector<std::tuple<int32_t, size_t, bool>> out;
  for (size_t k = 0; k < ns; ++k) out.emplace_back(windows[k].before >= 0 ? windows[k].before : windows[k].read, k, windows[k].before < 0);
  std::sort(out.begin(), out.end());
  int prev = -1;
  double most = 0;
  for (auto [issue, k, again] : out) {
    const SwapWindow& w = windows[k];
    const int d = lp.col(0, milp::kUnbounded, false);
    lp.ge(Lin::var(d), q.at(issue + 1) + Lin::var(m.swap_col[k], w.out_ms));
    if (prev >= 0) lp.ge(Lin::var(d), Lin::var(prev) + Lin::var(m.swap_col[k], w.out_ms));
    most = std::max(most, start[size_t(issue) + 1] + q.shift.most_at(issue + 1)) + w.out_ms;
    CopyQueues::Ends& e = q.ends[k];
    if (again) {
      e.again_done = d, e.again_most = most;
      e.freed_again_until = std::min(nn, first_at_or_after(issue + 1, most));
    } else {
      e.done = d, e.done_most = most;
      e.freed_until = std::min(nn, first_at_or_after(issue + 1, most));
    }
    prev = d;
  }
  lp.ge(Lin::var(stall), Lin::var(prev) - q.at(nn));
  // Back to the device: from the last needed to the first. Copies for the
  // optimizer are each alone on the stream (a relaxation): the rewrite
  // splits its node into buckets, and their copies interleave with its parts
  // in an order the model does not follow (queued here, the model counted a
  // copy back as started before a clone that the rewrite started after).
  double total = 0;
  for (const SwapWindow& w : windows) total += w.in_ms;
  std::vector<std::pair<double, size_t>> back;
  for (size_t k = 0; k < ns; ++k) back.emplace_back(windows[k].land_by, k);
  std::sort(back.begin(), back.end(), std::greater<>());
  int queued = -1, last_alone = -1;  // the queue's last P column; the last optimizer copy's
  double least = start.back();       // the queue's earliest start, every candidate swapped
  for (auto [land_by, k] : back) {
    const SwapWindow& w = windows[k];
    const int p = lp.col(-total - 1, start.back() + q.shift.most_at(nn), false);
    lp.ge(Lin(w.land_by) + q.shift.at(w.read) - Lin::var(m.swap_col[k], w.in_ms), Lin::var(p));
    CopyQueues::Ends& e = q.ends[k];
    if (w.by_optimizer) {
      e.begin_least = w.land_by - w.in_ms;
      last_alone = p;
    } else {
      if (queued >= 0) lp.ge(Lin::var(queued) - Lin::var(m.swap_col[k], w.in_ms), Lin::var(p));
      least = std::min(least, w.land_by) - w.in_ms;
      e.begin_least = least;
      queued = p;
    }
    e.begin = p;
    e.back_from = std::max(w.freed, rewrite::prefetch_point(start, e.begin_least + w.in_ms, w.in_ms, w.before, w.read));
    q.back_most[k] = rewrite::prefetch_point(start, w.land_by + q.shift.most_at(w.read), w.in_ms, w.before, w.read);
    // A swapped copy back starts once its copy out is done, or compute waits.
    if (w.before >= 0) {
      const double big = std::max(0.0, e.done_most - e.begin_least);
      lp.ge(Lin::var(stall) + big, Lin::var(e.done) - Lin::var(p) + Lin::var(m.swap_col[k], big));
    }
  }
  for (int p : {queued, last_alone})
    if (p >= 0) lp.ge(Lin::var(stall), Lin(0) - Lin::var(p));
  return q;
}

}  // namespace mutwo::plan
