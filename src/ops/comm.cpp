// Data-parallel ops (the rows; kernels in src/kernels/comm.cpp, the pass that
// places them in src/dist): each rank's rows of the batch, gradient buckets
// all-reduced or reduce-scattered between a start node (the collective
// launched, the rest of the backward pass runs on) and a wait node, and, for a
// sharded optimizer, each rank's slice of the flattened parameters (kept, as
// optimizer state) and their all-gather. Collectives are tagged kCollective: never recomputed, and the
// ranks must run them in one order (the graph's).
//
// A bucket is the concatenation of its tensors flattened, in input order,
// padded with zeros to a multiple of {world} where it is sharded (shard =
// padded / world elements, rank r's the elements [r*shard, (r+1)*shard)).
#include "ops/attrs.h"
#include "ops/builder.h"
#include "ops/infer.h"

namespace mutwo::ops {

std::vector<ir::Shape> bucket_shapes(const ir::Node& n) {
  const std::vector<int64_t>& code = n.attrs.ints("shapes");
  std::vector<ir::Shape> shapes;
  for (size_t i = 0; i < code.size();) {
    MUTWO_CHECK(code[i] >= 0 && i + 1 + static_cast<size_t>(code[i]) <= code.size(),
                "{}: shapes must list each tensor's rank then its dimensions, got [{}]", n.op, fmt::join(code, ","));
    ir::Shape s(code.begin() + static_cast<std::ptrdiff_t>(i + 1),
                code.begin() + static_cast<std::ptrdiff_t>(i + 1 + static_cast<size_t>(code[i])));
    for (int64_t d : s) MUTWO_CHECK(d >= 0, "{}: negative dimension in shapes [{}]", n.op, fmt::join(code, ","));
    shapes.push_back(std::move(s));
    i += 1 + static_cast<size_t>(code[i]);
  }
  return shapes;
}

std::vector<int64_t> encode_shapes(const std::vector<ir::Shape>& shapes) {
  std::vector<int64_t> code;
  for (const ir::Shape& s : shapes) {
    code.push_back(static_cast<int64_t>(s.size()));
    code.insert(code.end(), s.begin(), s.end());
  }
  return code;
}

int64_t world_of(const ir::Node& n) {
  int64_t w = n.attrs.i("world");
  MUTWO_CHECK(w >= 1, "{}: world must be at least 1, got {}", n.op, w);
  return w;
}

int64_t padded_numel(int64_t numel, int64_t world) { return (numel + world - 1) / world * world; }

namespace {

using ir::DType;
using ir::TensorType;

// Inputs [first, end) of one floating dtype; their total element count.
int64_t bucket_numel(const InferArgs& a, size_t first, size_t end, DType* dtype) {
  MUTWO_CHECK(end > first, "{}: a bucket needs at least one tensor", a.node.op);
  int64_t total = 0;
  for (size_t i = first; i < end; ++i) {
    MUTWO_CHECK(a.has(i), "{}: input {} is absent", a.node.op, i);
    infer::require_float(a.input(i), a.node.op);
    if (i > first) infer::require_same_dtype(a.input(first), a.input(i), a.node.op);
    total += a.input(i).numel();
  }
  *dtype = a.input(first).dtype;
  return total;
}

// ---- shard_rows(x) {world} -> rows [r*B, (r+1)*B) of x's N*B (a view): rank r's data.
Types shard_rows_infer(const InferArgs& a) {
  const TensorType& x = a.input(0);
  int64_t w = world_of(a.node);
  MUTWO_CHECK(x.rank() >= 1 && x.shape[0] % w == 0, "shard_rows: {} is {}, whose first dimension does not split into {} ranks",
              a.name(0), ir::to_string(x), w);
  TensorType out = x;
  out.shape[0] /= w;
  return {out};
}

// ---- allreduce_start(g1, ..., gk) {bucket, world} -> the bucket (flat), divided by
// world and summed over the ranks in the background.
Types allreduce_start_infer(const InferArgs& a) {
  world_of(a.node);
  DType d;
  int64_t n = bucket_numel(a, 0, a.in.size(), &d);
  return {TensorType{{n}, d}};
}

// ---- allreduce_wait(bucket) {bucket, world, shapes} -> one view of the bucket per tensor, once the sum arrived.
Types allreduce_wait_infer(const InferArgs& a) {
  const TensorType& flat = a.input(0);
  infer::require_rank(flat, 1, "allreduce_wait's bucket");
  world_of(a.node);
  Types out;
  int64_t total = 0;
  for (const ir::Shape& s : bucket_shapes(a.node)) {
    out.push_back(TensorType{s, flat.dtype});
    total += out.back().numel();
  }
  MUTWO_CHECK(!out.empty() && total == flat.numel(), "allreduce_wait: shapes hold {} elements, the bucket {} has {}",
              total, a.name(0), flat.numel());
  return out;
}

// ---- reduce_scatter_start(g1, ..., gk) {bucket, world} -> the bucket, padded to a
// multiple of world; the sum of rank r's slice lands in it in the background.
Types reduce_scatter_start_infer(const InferArgs& a) {
  DType d;
  int64_t n = bucket_numel(a, 0, a.in.size(), &d);
  return {TensorType{{padded_numel(n, world_of(a.node))}, d}};
}

// ---- reduce_scatter_wait(bucket) {bucket, world} -> this rank's slice of the sum (a copy).
// ---- all_gather(shard) {bucket, world} -> every rank's shard, in rank order.
Types shard_of_flat_infer(const InferArgs& a) {
  const TensorType& flat = a.input(0);
  infer::require_rank(flat, 1, a.node.op);
  int64_t w = world_of(a.node);
  MUTWO_CHECK(flat.numel() % w == 0, "{}: {} has {} elements, not a multiple of world {}", a.node.op, a.name(0),
              flat.numel(), w);
  return {TensorType{{flat.numel() / w}, flat.dtype}};
}
Types all_gather_infer(const InferArgs& a) {
  const TensorType& shard = a.input(0);
  infer::require_rank(shard, 1, "all_gather");
  return {TensorType{{shard.numel() * world_of(a.node)}, shard.dtype}};
}

// ---- flat_shard(shard, p1, ..., pk) {world}: writes this rank's slice of the padded
// bucket of p1..pk into `shard` (in place: a persistent value, the optimizer's copy
// of the rank's parameters, as ZeRO keeps it). No outputs.
Types flat_shard_infer(const InferArgs& a) {
  DType d;
  int64_t w = world_of(a.node);
  int64_t n = bucket_numel(a, 1, a.in.size(), &d);
  infer::require_shape(a.input(0), {padded_numel(n, w) / w}, "flat_shard's shard");
  infer::require_dtype(a.input(0), d, "flat_shard's shard");
  return {};
}

// ---- unflatten_into(p1, ..., pk, flat): writes the bucket `flat` back into the
// tensors it was made of (in place; padding ignored). No outputs.
Types unflatten_into_infer(const InferArgs& a) {
  MUTWO_CHECK(a.in.size() >= 2, "unflatten_into takes the tensors, then the bucket");
  DType d;
  int64_t n = bucket_numel(a, 0, a.in.size() - 1, &d);
  const TensorType& flat = a.input(a.in.size() - 1);
  infer::require_rank(flat, 1, "unflatten_into's bucket");
  MUTWO_CHECK(flat.dtype == d && flat.numel() >= n, "unflatten_into: the bucket {} is {}, too small for {} elements of {}",
              a.name(a.in.size() - 1), ir::to_string(flat), n, ir::to_string(d));
  return {};
}
std::vector<int> all_but_last(const ir::Node& n) {
  std::vector<int> pos;
  for (size_t i = 0; i + 1 < n.inputs.size(); ++i) pos.push_back(static_cast<int>(i));
  return pos;
}

// Bytes sent and received, not FLOPs: the cost model's bytes_moved covers them.
double no_flops(const FlopArgs&) { return 0; }

}  // namespace

void add_comm_ops(std::vector<OpDef>& t) {
  // name, tags, inputs (min, max), shape inference, derivative, FLOPs, attributes
  const AttrSpec world{"world", kIntAttr}, bucket{"bucket", kIntAttr};
  t.push_back({"shard_rows", kView, 1, 1, shard_rows_infer, nullptr, no_flops, {world}});
  t.push_back({"allreduce_start", kCollective, 1, kVariadic, allreduce_start_infer, nullptr, no_flops,
               {bucket, world}});
  t.push_back({"allreduce_wait", kView | kCollective, 1, 1, allreduce_wait_infer, nullptr, no_flops,
               {bucket, world, {"shapes", kIntsAttr}}});
  t.push_back({"reduce_scatter_start", kCollective, 1, kVariadic, reduce_scatter_start_infer, nullptr, no_flops,
               {bucket, world}});
  t.push_back({"reduce_scatter_wait", kCollective, 1, 1, shard_of_flat_infer, nullptr, no_flops, {bucket, world}});
  t.push_back({"flat_shard", kInplace, 2, kVariadic, flat_shard_infer, nullptr, no_flops, {world}, {0}});
  t.push_back({"all_gather", kCollective, 1, 1, all_gather_infer, nullptr, no_flops, {world}});
  OpDef unflatten{"unflatten_into", kInplace, 2, kVariadic, unflatten_into_infer, nullptr, no_flops};
  unflatten.mutates_of = all_but_last;
  t.push_back(unflatten);
}

}  // namespace mutwo::ops
