// The data-parallel pass (see data_parallel.h): the one-process step rebuilt
// value by value and node by node, with input shards, gradient buckets and,
// sharded, the optimizer on each rank's slice.
#include "dist/data_parallel.h"

#include <algorithm>
#include <map>
#include <unordered_set>
#include <utility>

#include "ops/attrs.h"
#include "ops/builder.h"
#include "ops/op.h"
#include "support/error.h"

namespace mutwo::dist {

namespace {

using ir::ValueId;

struct Entry {  // one parameter of the optimizer node
  size_t index;        // its position in the optimizer's parameter list
  int32_t ready;       // the node that makes its gradient
};

struct Bucket {
  std::vector<size_t> members;  // optimizer list positions, in the order their gradients are made
  int32_t ready = -1;           // the node after which the start node goes
  ValueId flat = ir::kNoValue;  // the start node's output (new graph)
  ValueId shard = ir::kNoValue;  // sharded: the reduce-scatter's wait output, the rank's mean gradients
};

std::string bucket_name(size_t k) { return fmt::format("bucket{}", k); }

// The pass's state: the step read, the graph being written, and its buckets.
class DataParallel {
 public:
  DataParallel(const ir::Graph& step, const DataParallelOptions& o);
  ir::Graph run();

 private:
  ValueId param(size_t i) const { return optimizer.inputs[i]; }
  ValueId grad(size_t i) const { return optimizer.inputs[P + i]; }
  ValueId state(size_t l, size_t i) const { return optimizer.inputs[(2 + l) * P + i]; }
  std::vector<ValueId> remap(const std::vector<ValueId>& ids) const {
    std::vector<ValueId> out;
    for (ValueId v : ids) out.push_back(v == ir::kNoValue ? v : map[static_cast<size_t>(v)]);
    return out;
  }
  template <typename Which>
  std::vector<ValueId> members(const Bucket& bk, Which which) const {
    std::vector<ValueId> out;
    for (size_t i : bk.members) out.push_back(map[static_cast<size_t>(which(i))]);
    return out;
  }
  static int32_t find_optimizer(const ir::Graph& step);
  void make_buckets();
  void copy_values();
  void wait_shard(size_t k);
  void bucket_means(size_t k, std::vector<std::vector<ValueId>>& in);
  void bucket_shards(size_t k, std::vector<std::vector<ValueId>>& in);
  void optimizer_step(size_t n);
  void start_buckets(size_t n);

  const ir::Graph& step;
  const DataParallelOptions& o;
  const std::vector<ir::Node>& nodes;
  const int32_t opt;  // the optimizer node
  const ir::Node& optimizer;
  const ops::OptimLists lists;
  const size_t P;         // parameters
  const size_t n_states;  // optimizer state lists
  ir::UseIndex uses;
  std::vector<Bucket> buckets;
  ir::Graph g;
  std::vector<ValueId> map;  // old value id -> new
  ops::Builder b;
};

// The optimizer node and its lists.
int32_t DataParallel::find_optimizer(const ir::Graph& step) {
  const auto& nodes = step.nodes();
  int32_t opt = -1;
  for (size_t n = 0; n < nodes.size(); ++n)
    if (!ops::optimizer_lists(nodes[n]).empty()) {
      MUTWO_CHECK(opt < 0, "data-parallel: the step has two optimizer nodes ({} and {}); one is expected", opt, n);
      opt = static_cast<int32_t>(n);
    }
  MUTWO_CHECK(opt >= 0, "data-parallel: the step has no optimizer node (sgd_step or adam_step), so no gradients to share");
  return opt;
}

DataParallel::DataParallel(const ir::Graph& step, const DataParallelOptions& o)
    : step(step), o(o), nodes(step.nodes()), opt(find_optimizer(step)), optimizer(nodes[static_cast<size_t>(opt)]),
      lists(ops::optimizer_lists(optimizer)), P(optimizer.inputs.size() / lists.size()), n_states(lists.size() - 2),
      uses(step), b(g) {}

// Buckets, in the order the backward pass makes the gradients.
void DataParallel::make_buckets() {
  std::vector<Entry> entries;
  for (size_t i = 0; i < P; ++i) {
    int32_t ready = uses.producer[static_cast<size_t>(grad(i))];
    MUTWO_CHECK(ready >= 0 && ready < opt, "data-parallel: the gradient %{} of %{} is not made before the optimizer",
                step.value(grad(i)).name, step.value(param(i)).name);
    entries.push_back({i, ready});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.ready < b.ready; });
  int64_t bytes = 0;
  for (const Entry& e : entries) {
    const ir::TensorType& t = step.type(grad(e.index));
    bool fresh = buckets.empty() || bytes + t.bytes() > o.bucket_bytes ||
                 step.type(grad(buckets.back().members.front())).dtype != t.dtype;
    if (fresh) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().members.push_back(e.index);
    buckets.back().ready = e.ready;
    bytes += t.bytes();
  }
}

// Values: the same, in the same order (inputs drawn from one seed as before),
// inputs at N times the rows, and without the per-parameter state when sharded.
void DataParallel::copy_values() {
  std::unordered_set<ValueId> dropped;
  if (o.shard_optimizer)
    for (size_t l = 0; l < n_states; ++l)
      for (size_t i = 0; i < P; ++i) dropped.insert(state(l, i));
  g.name = step.name;
  g.data_file = step.data_file;
  map.assign(step.num_values(), ir::kNoValue);
  std::vector<ValueId> sharded;  // old ids of inputs, to be split by rows
  for (const ir::Value& v : step.values()) {
    if (dropped.count(v.id)) continue;
    ir::TensorType t = v.type;
    if (v.role == ir::Role::input && uses.producer[static_cast<size_t>(v.id)] < 0) {
      MUTWO_CHECK(v.init.kind != ir::Init::data,
                  "data-parallel: input %{} is read from the step's tensor file, which holds one batch, not every "
                  "rank's; train a zoo model (--model) on several ranks",
                  v.name);
      MUTWO_CHECK(t.rank() >= 1, "data-parallel: input %{} is a scalar, which has no rows to split over the ranks",
                  v.name);
      t.shape[0] *= o.world;
      sharded.push_back(v.id);
    }
    map[static_cast<size_t>(v.id)] = g.add_value(v.name, t, v.role, v.init);
  }
  b.scope = "data";
  for (ValueId v : sharded)
    map[static_cast<size_t>(v)] =
        b.op("shard_rows", {map[static_cast<size_t>(v)]}, {{"world", o.world}}, step.value(v).name + ".shard");
}

// Sharded: the wait that ends bucket k's reduce-scatter. It comes when the
// next bucket starts (one bucket in flight beside the backward pass), so
// each full bucket is freed early and only the rank's slices stay (ZeRO-2).
void DataParallel::wait_shard(size_t k) {
  Bucket& bk = buckets[k];
  if (bk.shard != ir::kNoValue) return;
  std::string scope = std::exchange(b.scope, bucket_name(k));
  bk.shard = b.op("reduce_scatter_wait", {bk.flat}, {{"bucket", static_cast<int64_t>(k)}, {"world", o.world}},
                  bucket_name(k) + ".grad_shard");
  g.value(bk.shard).role = ir::Role::gradient;
  b.scope = std::move(scope);
}

// Unsharded: bucket k's all-reduce waited for; its mean gradients, the
// parameters and their state go to the optimizer's lists `in`.
void DataParallel::bucket_means(size_t k, std::vector<std::vector<ValueId>>& in) {
  const Bucket& bk = buckets[k];
  std::vector<ir::Shape> shapes;
  for (size_t i : bk.members) shapes.push_back(step.type(grad(i)).shape);
  auto means = b.call("allreduce_wait", {bk.flat},
                      {{"bucket", static_cast<int64_t>(k)}, {"world", o.world}, {"shapes", ops::encode_shapes(shapes)}},
                      bucket_name(k) + ".mean");
  for (size_t j = 0; j < bk.members.size(); ++j) {
    g.rename(means[j], g.unique_name(step.value(grad(bk.members[j])).name + ".mean"));
    g.value(means[j]).role = ir::Role::gradient;
  }
  std::vector<ValueId> params = members(bk, [&](size_t i) { return param(i); });
  in[0].insert(in[0].end(), params.begin(), params.end());
  in[1].insert(in[1].end(), means.begin(), means.end());
  for (size_t l = 0; l < n_states; ++l) {
    std::vector<ValueId> s = members(bk, [&](size_t i) { return state(l, i); });
    in[2 + l].insert(in[2 + l].end(), s.begin(), s.end());
  }
}

// Sharded: bucket k's gradient slice, the rank's slice of its parameters and
// the slice's fresh optimizer state go to the optimizer's lists `in`.
void DataParallel::bucket_shards(size_t k, std::vector<std::vector<ValueId>>& in) {
  wait_shard(k);
  const Bucket& bk = buckets[k];
  const ValueId gshard = bk.shard;
  // The rank's parameters, flattened: optimizer state, as ZeRO counts its copy of them.
  const int64_t numel = g.type(gshard).numel();
  ValueId pshard = b.input(g.unique_name(bucket_name(k) + ".param_shard"),
                           ir::TensorType{{numel}, g.type(gshard).dtype}, ir::Role::optimizer_state, {ir::Init::zeros});
  std::vector<ValueId> into = members(bk, [&](size_t i) { return param(i); });
  into.insert(into.begin(), pshard);
  b.call("flat_shard", into, {{"world", o.world}});
  in[0].push_back(pshard);
  in[1].push_back(gshard);
  for (size_t l = 0; l < n_states; ++l) {
    const ir::Value& first = step.value(state(l, bk.members.front()));
    const std::string& pname = step.value(param(bk.members.front())).name;
    std::string suffix = first.name.rfind(pname, 0) == 0 ? first.name.substr(pname.size()) : "." + std::string(lists[2 + l]);
    in[2 + l].push_back(b.input(g.unique_name(bucket_name(k) + suffix), g.type(pshard), ir::Role::optimizer_state, first.init));
  }
}

// The waits (closing the backward pass, as DDP's do), the optimizer step
// (node n), and (sharded) the parameters gathered back.
void DataParallel::optimizer_step(size_t n) {
  b.phase = ir::Phase::backward;
  std::vector<std::vector<ValueId>> in(lists.size());
  for (size_t k = 0; k < buckets.size(); ++k) {
    b.scope = bucket_name(k);
    if (!o.shard_optimizer)
      bucket_means(k, in);
    else
      bucket_shards(k, in);
  }
  std::vector<ValueId> all;
  for (const auto& list : in) all.insert(all.end(), list.begin(), list.end());
  b.scope = nodes[n].scope;
  b.phase = ir::Phase::optimizer;
  b.call(nodes[n].op, all, nodes[n].attrs);
  if (o.shard_optimizer)
    for (size_t k = 0; k < buckets.size(); ++k) {
      b.scope = bucket_name(k);
      ValueId gathered = b.op("all_gather", {in[0][k]}, {{"bucket", static_cast<int64_t>(k)}, {"world", o.world}},
                              bucket_name(k) + ".gathered");
      std::vector<ValueId> into = members(buckets[k], [&](size_t i) { return param(i); });
      into.push_back(gathered);
      b.call("unflatten_into", into);
    }
}

// Buckets whose last gradient node n made start now.
void DataParallel::start_buckets(size_t n) {
  b.phase = ir::Phase::backward;
  for (size_t k = 0; k < buckets.size(); ++k) {
    if (buckets[k].ready != static_cast<int32_t>(n)) continue;
    b.scope = bucket_name(k);
    buckets[k].flat = b.op(o.shard_optimizer ? "reduce_scatter_start" : "allreduce_start",
                           members(buckets[k], [&](size_t i) { return grad(i); }),
                           {{"bucket", static_cast<int64_t>(k)}, {"world", o.world}}, bucket_name(k));
    g.value(buckets[k].flat).role = ir::Role::gradient;
    if (o.shard_optimizer && k > 0) wait_shard(k - 1);
  }
}

ir::Graph DataParallel::run() {
  make_buckets();
  copy_values();
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (static_cast<int32_t>(n) != opt) {
      ir::Node copy = nodes[n];
      copy.inputs = remap(copy.inputs);
      copy.outputs = remap(copy.outputs);
      g.append(std::move(copy));
    } else {
      optimizer_step(n);
    }
    start_buckets(n);
  }
  g.outputs = remap(step.outputs);
  ops::verify(g);
  return std::move(g);
}

}  // namespace

ir::Graph data_parallel(const ir::Graph& step, const DataParallelOptions& o) {
  MUTWO_CHECK(o.world >= 1, "data-parallel: world size must be at least 1, got {}", o.world);
  MUTWO_CHECK(o.bucket_bytes > 0, "--bucket-size must be positive, got {} bytes", o.bucket_bytes);
  return DataParallel(step, o).run();
}

}  // namespace mutwo::dist
