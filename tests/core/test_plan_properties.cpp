// Property tests for every planner (Checkmate's kind: plans judged by one
// simulator, never trusted) on synthetic training steps built
// in plain data, in milliseconds: seeded random chains, diamonds, U-Net-like
// long skips and transformer-like blocks, with FLOP-based or random node times.
// For each planner and budgets from 110% down to 30% of the unplanned peak:
// a feasible plan fits and its prediction is the simulator's; at or above the
// unplanned peak mutwo and optimal drop nothing; none, per-layer and sqrt-n
// ignore the budget; as the budget falls mutwo's peak never rises, a plan of
// mutwo's that drops anything peaks below the unplanned step, and the
// optimum never gets cheaper (and matches brute force); only whole storages of
// non-random activations are dropped; every recompute node reads only clones
// made before it or values kept at that point.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <tuple>
#include <map>
#include <set>

#include "autodiff/autodiff.h"
#include "models/model.h"
#include "plan_inputs.h"
#include "ops/builder.h"
#include "ops/op.h"
#include "plan/optimal.h"
#include "plan/plan.h"
#include "plan/blocks.h"
#include "plan/pipeline.h"
#include "profile/profile.h"
#include "rewrite/recompute.h"
#include "support/error.h"

namespace mutwo {
namespace {

using testing::input_of;
using testing::with_random_times;

// A seeded LCG: the same graphs on every platform and standard library.
struct Rng {
  uint32_t s;
  uint32_t next() { return (s = s * 1664525u + 1013904223u) >> 8; }
  int64_t in(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(next() % static_cast<uint32_t>(hi - lo + 1)); }
  bool coin(int percent) { return next() % 100 < static_cast<uint32_t>(percent); }
};

enum class Family { chain, diamond, unet, transformer };
const char* name_of(Family f) { return std::array{"chain", "diamond", "unet", "transformer"}[static_cast<size_t>(f)]; }

// Builds one random forward graph; blocks are scoped "layers.3", "down.1", "h.2" (block_of cuts there).
struct Net {
  ir::Graph g;
  ops::Builder b{g};
  Rng r;
  bool dropout;

  explicit Net(uint32_t seed) : r{seed * 747796405u + 1u}, dropout(r.coin(60)) {}

  size_t nodes() const { return g.nodes().size(); }
  int64_t width(ir::ValueId v) const { return g.type(v).shape.back(); }
  ir::ValueId param(const std::string& what, ir::Shape s) {
    return b.input(g.unique_name(b.scope + "." + what), {std::move(s), ir::DType::f32}, ir::Role::parameter,
                   {ir::Init::uniform, -0.1, 0.1});
  }
  ir::ValueId linear(ir::ValueId h, int64_t out) {
    return b.op("linear", {h, param("weight", {out, width(h)}), param("bias", {out})});
  }
  ir::ValueId layer_norm(ir::ValueId h) {
    return b.call("layer_norm", {h, param("weight", {width(h)}), param("bias", {width(h)})}, {{"eps", 1e-5}})[0];
  }
  ir::ValueId drop(ir::ValueId h) {  // a random mask (replayed when dropped) and a pointwise apply
    ir::ValueId mask = b.op("dropout_mask", {h}, {{"p", 0.1}});
    return b.op("dropout_apply", {h, mask}, {{"p", 0.1}});
  }
  // A pointwise op, a dropout, or a view round trip (reshape to 1-D, tanh, reshape back).
  ir::ValueId pointwise(ir::ValueId h) {
    switch (r.in(0, 5)) {
      case 0: return b.op("tanh", {h});
      case 1: return b.op("relu", {h});
      case 2: return b.op("gelu", {h}, {{"approximate", std::string("tanh")}});
      case 3: return b.op("scale", {h}, {{"alpha", 0.5}});
      case 4: return dropout ? drop(h) : b.op("mul", {h, h});
      default: {
        ir::Shape s = g.type(h).shape;
        ir::ValueId flat = b.op("reshape", {h}, {{"shape", ir::Shape{g.type(h).numel()}}});
        return b.op("reshape", {b.op("tanh", {flat})}, {{"shape", s}});
      }
    }
  }
  int64_t some_width() { return r.in(4, 40); }

  ir::ValueId chain(ir::ValueId h, size_t target) {
    for (int i = 0; i == 0 || nodes() + 4 < target; ++i) {
      ops::Builder::Scope s(b, fmt::format("layers.{}", i));
      for (int64_t k = r.in(1, 3); k > 0; --k) h = r.coin(35) ? linear(h, some_width()) : pointwise(h);
    }
    return h;
  }
  ir::ValueId diamond(ir::ValueId h, size_t target) {
    for (int i = 0; i == 0 || nodes() + 8 < target; ++i) {
      ops::Builder::Scope s(b, fmt::format("layers.{}", i));
      ir::ValueId left = pointwise(linear(h, width(h)));
      ir::ValueId right = r.coin(50) ? linear(h, width(h)) : pointwise(h);
      ir::ValueId join = b.op("add", {left, right});
      h = r.coin(40) ? b.op("add", {join, h}) : pointwise(join);
    }
    return h;
  }
  ir::ValueId unet(ir::ValueId h, size_t target) {
    std::vector<ir::ValueId> skips;
    for (int i = 0; i == 0 || nodes() + 4 + 3 * skips.size() < target; ++i) {  // each down block needs about 3 nodes up
      ops::Builder::Scope s(b, fmt::format("down.{}", i));
      skips.push_back(h);
      h = pointwise(linear(h, some_width()));
    }
    for (size_t i = skips.size(); i-- > 0;) {
      ops::Builder::Scope s(b, fmt::format("up.{}", i));
      h = b.op("add", {linear(h, width(skips[i])), skips[i]});
      if (r.coin(50)) h = pointwise(h);
    }
    return h;
  }
  ir::ValueId transformer(ir::ValueId h, size_t target) {
    for (int i = 0; i == 0 || nodes() + 12 < target; ++i) {
      ops::Builder::Scope s(b, fmt::format("h.{}", i));
      const int64_t c = width(h);
      if (r.coin(50)) {  // single-head self-attention without projections
        ir::ValueId a = layer_norm(h);
        ir::ValueId scores = b.op("scale", {b.op("matmul", {a, a}, {{"transpose_b", int64_t{1}}})}, {{"alpha", 0.25}});
        ir::ValueId probs = b.op("softmax", {scores}, {{"dim", int64_t{2}}});
        if (dropout) probs = drop(probs);
        h = b.op("add", {h, b.op("matmul", {probs, a})});
      }
      ir::ValueId f = linear(layer_norm(h), r.in(c, 3 * c));
      f = linear(b.op("gelu", {f}, {{"approximate", std::string("none")}}), c);
      if (dropout && r.coin(60)) f = drop(f);
      h = b.op("add", {h, f});
    }
    return h;
  }
};

// One graph and its plans: per planner, per budget from the largest (computed once: two tests read them).
struct Sweep {
  plan::PlanInput in;
  size_t forward_nodes = 0;
  std::string what;  // for SCOPED_TRACE: family, seed, size, times
  int64_t top = 0;   // the unplanned peak
  std::map<std::string, std::vector<plan::Plan>> plans;
};

// Seeds 0 and 1 of every family are small (for the optimal planner); the rest have 16 to 56 forward nodes.
Sweep generate(Family f, uint32_t seed) {
  Net n(seed * 4 + static_cast<uint32_t>(f));
  const size_t target = seed < 2 ? 12 + 3 * seed : static_cast<size_t>(n.r.in(16, 56));
  const int64_t batch = n.r.in(2, 32), seq = n.r.in(2, 8);
  n.g.name = fmt::format("{}_{}", name_of(f), seed);
  ir::Shape xs = f == Family::transformer ? ir::Shape{batch, seq, n.r.in(4, 24)} : ir::Shape{batch, n.r.in(4, 40)};
  ir::ValueId h = n.b.input("x", {xs, ir::DType::f32}, ir::Role::input, {ir::Init::normal, 0, 1});
  {
    ops::Builder::Scope s(n.b, "stem");  // outside every block
    h = n.linear(h, f == Family::transformer ? n.r.in(4, 16) : n.some_width());
  }
  h = f == Family::chain     ? n.chain(h, target)
      : f == Family::diamond ? n.diamond(h, target)
      : f == Family::unet    ? n.unet(h, target)
                             : n.transformer(h, target);
  {
    ops::Builder::Scope s(n.b, "head");
    h = n.pointwise(n.linear(h, n.r.in(2, 16)));
  }
  n.b.phase = ir::Phase::loss;
  ir::ValueId loss = n.b.op("mean", {h}, {}, "loss");  // ()
  Sweep out;
  out.forward_nodes = n.nodes();
  const bool random_times = seed % 2 == 1;
  out.what = fmt::format("{} seed {} ({} forward nodes, {} times)", name_of(f), seed, out.forward_nodes,
                         random_times ? "random" : "FLOP");
  out.in = input_of(autodiff::build_training_step(std::move(n.g), loss, {}));
  if (random_times) out.in = with_random_times(std::move(out.in), seed);
  return out;
}

std::set<ir::ValueId> as_set(const std::vector<ir::ValueId>& v) { return {v.begin(), v.end()}; }

// Kept at backward time (rewrite/recompute.h): persistent values, and values made in fwd/loss
// that the backward pass reads, unless dropped.
std::vector<bool> kept_values(const ir::Graph& g, const std::set<ir::ValueId>& dropped) {
  ir::UseIndex uses(g);
  auto phase = [&](int32_t n) { return g.nodes()[static_cast<size_t>(n)].phase; };
  std::vector<bool> kept(g.num_values(), false);
  for (const ir::Value& v : g.values()) {
    const int32_t p = uses.producer[static_cast<size_t>(v.id)];
    bool read_in_bwd = false;
    for (int32_t u : uses.users[static_cast<size_t>(v.id)]) read_in_bwd |= phase(u) == ir::Phase::backward;
    kept[static_cast<size_t>(v.id)] =
        p < 0 ? ir::is_persistent(v.role)
              : (phase(p) == ir::Phase::forward || phase(p) == ir::Phase::loss) && read_in_bwd && !dropped.count(v.id);
  }
  return kept;
}

void expect_predicted(const plan::Plan& p, const plan::Simulation& sim) {
  EXPECT_EQ(p.predicted.peak_bytes, sim.peak_bytes);
  EXPECT_DOUBLE_EQ(p.predicted.extra_ms, sim.extra_ms);
  EXPECT_EQ(p.predicted.recompute_nodes, sim.recompute_nodes);
}

// What every plan must satisfy whatever its planner or budget.
void expect_valid_plan(const plan::PlanInput& in, const std::vector<plan::Candidate>& cands, const plan::Plan& p,
                       const std::string& planner, int64_t budget) {
  EXPECT_EQ(p.planner, planner);
  EXPECT_EQ(p.budget_bytes, budget);
  EXPECT_EQ(p.feasible, p.predicted.peak_bytes <= budget);
  const plan::Simulation sim = plan::simulate(in, p.drop, p.swap);
  expect_predicted(p, sim);

  // Only whole storages of droppable activations; each value once.
  const ir::Graph& g = in.graph;
  const std::set<ir::ValueId> dropped = as_set(p.drop);
  EXPECT_EQ(dropped.size(), p.drop.size()) << "a value is dropped twice";
  std::map<ir::ValueId, const plan::Candidate*> group;
  for (const plan::Candidate& c : cands)
    for (ir::ValueId m : c.members) group[m] = &c;
  for (ir::ValueId v : dropped) {
    ASSERT_TRUE(v >= 0 && static_cast<size_t>(v) < g.num_values()) << v;
    const std::string& name = g.value(v).name;
    EXPECT_EQ(g.value(v).role, ir::Role::activation) << "%" << name << " is " << ir::to_string(g.value(v).role);
    EXPECT_TRUE(rewrite::droppable(g, v)) << "%" << name << " is made by a node recomputation may not repeat (or by none)";
    auto it = group.find(v);
    ASSERT_NE(it, group.end()) << "%" << name << " is in no candidate";
    for (ir::ValueId m : it->second->members)
      EXPECT_TRUE(dropped.count(m)) << "%" << name << " is dropped without %" << g.value(m).name << " (same storage)";
  }

  // Recompute nodes read only clones made before them or values kept at that point.
  const std::vector<bool> kept = kept_values(g, dropped);
  const rewrite::Rewritten r = rewrite::insert_recomputation(g, p.drop);
  EXPECT_EQ(r.clones, sim.recompute_nodes);
  EXPECT_NO_THROW(ops::verify(r.graph));
  std::vector<bool> defined(r.graph.num_values(), false);
  for (size_t n = 0; n < r.graph.nodes().size(); ++n) {
    const ir::Node& node = r.graph.nodes()[n];
    if (node.phase == ir::Phase::recompute) {
      const ir::Node& src = g.nodes()[static_cast<size_t>(r.origin[n])];
      EXPECT_TRUE(src.phase == ir::Phase::forward || src.phase == ir::Phase::loss) << "clone of a " << src.op;
      EXPECT_TRUE(!ops::has(src, ops::kRandom) || ops::replays_rng(node)) << "random op " << src.op << " recomputed without its state";
      for (ir::ValueId v : node.inputs) {
        if (v == ir::kNoValue) continue;
        const bool clone = static_cast<size_t>(v) >= g.num_values();  // clones are appended to the values
        EXPECT_TRUE(clone ? defined[static_cast<size_t>(v)] : kept[static_cast<size_t>(v)])
            << "recompute of " << src.op << " reads %" << r.graph.value(v).name << ", "
            << (clone ? "a clone made after it" : "which is not kept");
      }
    }
    for (ir::ValueId o : node.outputs) defined[static_cast<size_t>(o)] = true;
  }
  for (ir::ValueId v : dropped)
    for (ir::ValueId s : plan::recompute_sources(in, p.drop, v))
      EXPECT_TRUE(kept[static_cast<size_t>(s)]) << "%" << g.value(v).name << " is recomputed from %" << g.value(s).name
                                                << ", which is not kept";
}

int64_t budget_at(int64_t top, size_t k) { return top * (110 - 5 * static_cast<int64_t>(k)) / 100; }  // 110% .. 30%
constexpr size_t kBudgets = 17;
constexpr uint32_t kSeeds = 8;

const Sweep& sweep(Family f, uint32_t seed) {
  static std::map<std::pair<Family, uint32_t>, Sweep> cache;
  auto [it, fresh] = cache.try_emplace({f, seed});
  Sweep& s = it->second;
  if (!fresh) return s;
  s = generate(f, seed);
  s.top = plan::simulate(s.in, {}).peak_bytes;
  for (size_t k = 0; k < kBudgets; ++k)
    for (const std::string& name : plan::planner_names())
      if (name != "optimal" || (plan::optimal_planner_built() && s.forward_nodes <= 18))
        s.plans[name].push_back(plan::run_planner(name, s.in, budget_at(s.top, k)));
  return s;
}

struct Tally {
  int graphs = 0, mutwo_lowers_at_half = 0, per_layer_drops = 0, optimal_graphs = 0, brute_forced = 0;
};

void check_sweep(const Sweep& s, Tally& tally) {
  const plan::PlanInput& in = s.in;
  SCOPED_TRACE(s.what);
  ASSERT_GE(s.forward_nodes, 10u);
  ASSERT_LE(s.forward_nodes, 60u);
  const std::vector<plan::Candidate> cands = plan::candidates(in);
  ASSERT_GE(cands.size(), 2u) << "too few candidates to be a test";
  ++tally.graphs;
  tally.optimal_graphs += s.plans.count("optimal") > 0;
  std::vector<plan::Simulation> every;  // with the optimal and few candidates: every drop set, to check it against
  const bool brute_force = s.plans.count("optimal") && cands.size() <= 10;
  tally.brute_forced += brute_force;
  for (uint32_t mask = 0; brute_force && mask < (1u << cands.size()); ++mask) {
    std::vector<ir::ValueId> drop;
    for (size_t c = 0; c < cands.size(); ++c)
      if (mask >> c & 1) drop.insert(drop.end(), cands[c].members.begin(), cands[c].members.end());
    every.push_back(plan::simulate(in, drop));
  }
  std::map<std::vector<ir::ValueId>, plan::Simulation> checked;  // drop lists already rewritten and checked
  for (const auto& [name, plans] : s.plans)
    for (size_t k = 0; k < plans.size(); ++k) {
      const plan::Plan& p = plans[k];
      const int64_t budget = budget_at(s.top, k);
      SCOPED_TRACE(fmt::format("{} at {}% = {} bytes (unplanned {}): {}", name, 110 - 5 * k, budget, s.top, p.note));
      std::vector<ir::ValueId> key = p.drop;
      std::sort(key.begin(), key.end());
      if (auto it = checked.find(key); it != checked.end()) {
        expect_predicted(p, it->second);
        EXPECT_EQ(p.feasible, p.predicted.peak_bytes <= budget);
      } else {
        expect_valid_plan(in, cands, p, name, budget);
        checked.emplace(key, p.predicted);
      }
      const bool budget_free = name == "none" || name == "per-layer" || name == "sqrt-n";
      if (name == "none" || (!budget_free && budget >= s.top)) {
        EXPECT_TRUE(p.drop.empty()) << "dropped with room to spare";
      }
      tally.per_layer_drops += name == "per-layer" && k == 0 && !p.drop.empty();
      tally.mutwo_lowers_at_half += name == "mutwo" && k == 12 && p.predicted.peak_bytes < s.top;  // at 50%
      if (name == "mutwo" && !p.drop.empty()) {  // only what is idle at the peak is dropped
        EXPECT_LT(p.predicted.peak_bytes, s.top) << "the greedy dropped without lowering the peak";
      }
      if (k > 0) {
        const plan::Plan& q = plans[k - 1];
        if (budget_free) {
          EXPECT_EQ(as_set(p.drop), as_set(q.drop)) << "the choice changed with the budget";
        }
        if (name == "mutwo") {  // docs/planners.md, "Why sweeps are monotone"
          EXPECT_LE(p.predicted.peak_bytes, q.predicted.peak_bytes) << "the peak rose as the budget fell";
          EXPECT_TRUE(as_set(p.drop) == as_set(q.drop) || q.predicted.peak_bytes > budget)
              << "the plan for the larger budget fits this one, yet the plan changed";
          if (!q.feasible) {
            EXPECT_EQ(as_set(p.drop), as_set(q.drop)) << "the greedy's lowest plan changed";
          }
        }
        if (name == "optimal" && p.feasible && q.feasible) {
          EXPECT_GE(p.predicted.extra_ms, q.predicted.extra_ms - 1e-9) << "cheaper under a smaller budget";
        }
      }
      if (name != "optimal") continue;
      const plan::Plan& greedy = s.plans.at("mutwo")[k];
      if (greedy.feasible) {
        EXPECT_TRUE(p.feasible) << "the greedy fits, so the optimum must";
        EXPECT_LE(p.predicted.extra_ms, greedy.predicted.extra_ms + 1e-9);
      }
      if (every.empty()) continue;
      double best = 1e30;
      for (const plan::Simulation& sim : every)
        if (sim.peak_bytes <= budget) best = std::min(best, sim.extra_ms);
      EXPECT_EQ(p.feasible, best < 1e30) << "brute force over " << every.size() << " drop sets disagrees";
      if (p.feasible) {  // within CBC's default cutoff increment, 1e-5 in the objective's unit (ms)
        EXPECT_NEAR(p.predicted.extra_ms, best, 1e-5) << "not the cheapest drop set that fits";
      }
    }
}

void check_family(Family f) {
  Tally tally;
  for (uint32_t seed = 0; seed < kSeeds; ++seed) check_sweep(sweep(f, seed), tally);
  EXPECT_GE(tally.mutwo_lowers_at_half * 2, tally.graphs) << "mutwo lowered no peak at 50% in most graphs";
  EXPECT_GE(tally.per_layer_drops * 4, tally.graphs * 3) << "per-layer dropped nothing in most graphs";
  if (plan::optimal_planner_built()) {
    EXPECT_GE(tally.optimal_graphs, 2) << "the optimal planner ran on too few graphs";
    EXPECT_GE(tally.brute_forced, 1) << "no graph small enough to check the optimum by brute force";
  }
}

// mutwo's plan is never worse than per-layer's or sqrt-n's under
// the same budget: where one of them fits, mutwo fits and its predicted extra
// time is at most theirs; where mutwo does not fit, its peak is at most theirs.
void expect_not_worse_than_peers(const plan::Plan& mutwo, const std::vector<const plan::Plan*>& peers) {
  for (const plan::Plan* p : peers) {
    SCOPED_TRACE(fmt::format("{}: peak {}, extra {} ms, {}", p->planner, p->predicted.peak_bytes, p->predicted.extra_ms,
                             p->feasible ? "fits" : "does not fit"));
    if (p->feasible) {
      EXPECT_TRUE(mutwo.feasible) << "mutwo does not fit (peak " << mutwo.predicted.peak_bytes << ") where "
                                  << p->planner << " does";
      EXPECT_LE(mutwo.predicted.extra_ms, p->predicted.extra_ms * (1 + 1e-9) + 1e-12)
          << "mutwo is slower than " << p->planner << " (" << mutwo.note << ")";
    }
    if (!mutwo.feasible) {
      EXPECT_LE(mutwo.predicted.peak_bytes, p->predicted.peak_bytes)
          << "mutwo's lowest peak is above " << p->planner << "'s (" << mutwo.note << ")";
    }
  }
}

TEST(PlannerProperties, MutwoNeverWorseThanPerLayerOrSqrtN) {
  int checked = 0;
  for (Family f : {Family::chain, Family::diamond, Family::unet, Family::transformer})
    for (uint32_t seed = 0; seed < kSeeds; ++seed) {
      const Sweep& s = sweep(f, seed);
      for (size_t k = 0; k < kBudgets; ++k) {
        SCOPED_TRACE(fmt::format("{} at {}% of {}", s.what, 110 - 5 * k, s.top));
        expect_not_worse_than_peers(s.plans.at("mutwo")[k], {&s.plans.at("per-layer")[k], &s.plans.at("sqrt-n")[k]});
        ++checked;
      }
      // Where the peers just fit, and every planner's floor.
      for (int64_t budget : {s.plans.at("per-layer")[0].predicted.peak_bytes, s.plans.at("sqrt-n")[0].predicted.peak_bytes,
                             int64_t{0}}) {
        SCOPED_TRACE(fmt::format("{} at {} bytes of {}", s.what, budget, s.top));
        const plan::Plan per_layer = plan::run_planner("per-layer", s.in, budget);
        const plan::Plan sqrt_n = plan::run_planner("sqrt-n", s.in, budget);
        expect_not_worse_than_peers(plan::run_planner("mutwo", s.in, budget), {&per_layer, &sqrt_n});
        ++checked;
      }
    }
  EXPECT_EQ(checked, 4 * static_cast<int>(kSeeds * (kBudgets + 3)));
}

// mutwo against the peers on `in` at budgets from the unplanned peak down to
// 20% of it, at the peers' own peaks (where they just fit) and at 0 (every
// planner's floor).
void check_against_peers(const plan::PlanInput& in, const std::vector<int>& percents) {
  const int64_t top = plan::simulate(in, {}).peak_bytes;
  std::vector<int64_t> budgets = {0};
  for (int pct : percents) budgets.push_back(top * pct / 100);
  for (const char* peer : {"per-layer", "sqrt-n"}) budgets.push_back(plan::run_planner(peer, in, 0).predicted.peak_bytes);
  for (int64_t budget : budgets) {
    SCOPED_TRACE(fmt::format("budget {} of unplanned {}", budget, top));
    const plan::Plan per_layer = plan::run_planner("per-layer", in, budget), sqrt_n = plan::run_planner("sqrt-n", in, budget);
    const plan::Plan mutwo = plan::run_planner("mutwo", in, budget);
    EXPECT_EQ(mutwo.feasible, mutwo.predicted.peak_bytes <= budget);
    expect_not_worse_than_peers(mutwo, {&per_layer, &sqrt_n});
  }
}

// A small zoo model's step, profiled by estimate (nothing runs).
profile::Profile zoo_profile(const std::string& model, int64_t batch, const std::string& device, int64_t image_size = 32) {
  models::ModelOptions o;
  o.name = model;
  o.batch = batch;
  if (model.rfind("resnet", 0) == 0) {
    o.image_size = image_size;
    o.classes = image_size == 224 ? 1000 : 10;
  }
  if (model == "bert-tiny") o.seq = 16;
  models::Model m = models::build_model(o);
  return profile::estimate_profile(autodiff::build_training_step(std::move(m.graph), m.loss, {}), device);
}

plan::PlanInput zoo_input(const std::string& model, int64_t batch, const std::string& device, int64_t image_size = 32) {
  return plan::make_input(zoo_profile(model, batch, device, image_size));
}

// Small zoo models from estimated profiles (nothing runs): the CPU's
// (recomputation only) and CUDA's (copy speeds: swaps and early updates too).
TEST(PlannerProperties, MutwoNeverWorseThanPerLayerOrSqrtNOnZooModels) {
  for (const auto& [model, batch, device] : std::vector<std::tuple<std::string, int64_t, std::string>>{
           {"resnet-18", 4, "cpu"}, {"resnet-50", 2, "cuda"}, {"bert-tiny", 4, "cpu"}, {"bert-tiny", 4, "cuda"},
           {"transformer-lm", 16, "cpu"}, {"mlp", 64, "cuda"}}) {
    SCOPED_TRACE(fmt::format("{} batch {} on {}", model, batch, device));
    check_against_peers(zoo_input(model, batch, device), {100, 90, 80, 70, 60, 50, 40, 30, 20});
  }
}

// ResNet-152 at batch 8 (224x224) with each node's time and workspace as
// measured on an H100 (tests/core/data), recomputation only: there the greedy
// alone stopped at 1114.3 MB, above per-layer's 1104.7: dropping
// the blocks' outputs one by one, it left every recomputation chain running
// back through the residual adds to the stem, all held at once at layer3.0's
// backward, with nothing idle there to drop.
TEST(PlannerProperties, MutwoNeverWorseThanPerLayerOnMeasuredResNet152) {
  plan::PlanInput in = zoo_input("resnet-152", 8, "cuda", 224);
  in.swap = false;
  std::ifstream f(std::string(MUTWO_TEST_DATA) + "/resnet-152_b8_h100_node_times.csv");
  ASSERT_TRUE(f) << "tests/core/data/resnet-152_b8_h100_node_times.csv";
  std::string line;
  size_t n = 0;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("name,", 0) == 0) continue;
    const size_t a = line.find(','), b = line.find(',', a + 1);
    const std::string name = line.substr(0, a);
    if (name == "start_extra_bytes") {
      in.start_extra_bytes = std::stoll(line.substr(a + 1));
      continue;
    }
    ASSERT_LT(n, in.node_ms.size());
    ASSERT_EQ(name, in.profile.nodes[n].name) << "node " << n;
    in.node_ms[n] = std::stod(line.substr(a + 1, b - a - 1));
    in.workspace[n] = std::stoll(line.substr(b + 1));
    ++n;
  }
  ASSERT_EQ(n, in.node_ms.size());
  check_against_peers(in, {60, 50});
}

// A percentage is of the activation memory at the unplanned peak, on top of
// the rest (docs/budgets.md): 100% is the unplanned peak; lowest is the
// planner's floor and feasible; a refusal's percentage fits; a fraction's
// bytes are at least at_least_bytes (wrap()'s budget kept across shapes).
TEST(PlannerProperties, BudgetsResolveAsDocumented) {
  int refused = 0;
  for (const auto& [model, batch] : std::vector<std::pair<std::string, int64_t>>{
           {"resnet-18", 4}, {"bert-tiny", 64}, {"transformer-lm", 16}}) {
    SCOPED_TRACE(fmt::format("{} batch {}", model, batch));
    plan::PlannedStep p = plan::prepare(zoo_profile(model, batch, "cpu", 64), {});
    const int64_t a = p.unplanned_activation_bytes, f = p.unplanned_peak - a;
    ASSERT_GT(a, 0);
    plan::PlanOptions po;
    po.budget = Budget::of_fraction(1.0);
    EXPECT_EQ(plan::budget_bytes(p, po), p.unplanned_peak);
    po.budget = Budget::of_fraction(0.6);
    EXPECT_EQ(plan::budget_bytes(p, po), f + static_cast<int64_t>(0.6 * static_cast<double>(a)));
    po.at_least_bytes = p.unplanned_peak;
    EXPECT_EQ(plan::budget_bytes(p, po), p.unplanned_peak);
    po.at_least_bytes = 0;
    po.budget = Budget::lowest();
    plan::choose_plan(p, po);
    const plan::Plan floor = plan::run_planner("mutwo", p.input, 0);
    EXPECT_TRUE(p.plan.feasible);
    EXPECT_EQ(p.plan.budget_bytes, p.plan.predicted.peak_bytes);
    EXPECT_LE(p.plan.predicted.peak_bytes, floor.predicted.peak_bytes);
    po.budget = Budget::of_fraction(0.01);
    plan::choose_plan(p, po);
    if (p.plan.feasible) continue;
    ++refused;
    const std::string text = plan::infeasible_text(p, po);
    const size_t at = text.find("try --budget ");
    ASSERT_NE(at, std::string::npos) << text;
    po.budget = parse_budget(text.substr(at + 13, text.find(',', at) - at - 13));
    EXPECT_EQ(po.budget.kind, Budget::Kind::fraction) << text;
    plan::choose_plan(p, po);
    EXPECT_TRUE(p.plan.feasible) << text;
  }
  EXPECT_GE(refused, 1) << "1% fitted everywhere: the refusals' advice went untested";
}

TEST(PlannerProperties, Chains) { check_family(Family::chain); }
TEST(PlannerProperties, Diamonds) { check_family(Family::diamond); }
TEST(PlannerProperties, UNetSkips) { check_family(Family::unet); }
TEST(PlannerProperties, TransformerBlocks) { check_family(Family::transformer); }

// A smaller budget never gives a higher peak, asked of every planner. The
// optimum's plans under smaller budgets fit those budgets; where none fits, what it shows must not sit above a plan
// it found under a larger budget.
TEST(PlannerProperties, OptimalPeakNeverRisesAsTheBudgetFalls) {
  if (!plan::optimal_planner_built()) GTEST_SKIP() << "built with -DMUTWO_WITH_CBC=OFF";
  int sweeps = 0;
  for (Family f : {Family::chain, Family::diamond, Family::unet, Family::transformer})
    for (uint32_t seed = 0; seed < kSeeds; ++seed) {
      const Sweep& s = sweep(f, seed);
      auto it = s.plans.find("optimal");
      if (it == s.plans.end()) continue;
      ++sweeps;
      for (size_t k = 1; k < it->second.size(); ++k) {
        const plan::Plan &p = it->second[k], &q = it->second[k - 1];
        EXPECT_LE(p.predicted.peak_bytes, q.predicted.peak_bytes)
            << s.what << ": at " << 110 - 5 * k << "% (" << p.note << ") above " << 115 - 5 * k << "% ("
            << q.note << ")";
      }
    }
  EXPECT_GE(sweeps, 8);
}

}  // namespace
}  // namespace mutwo
