// The executor's arena (see arena.h).
#include "runtime/arena.h"

#include <utility>

#include "support/error.h"

namespace mutwo::runtime {

Arena::Arena(const ir::Graph& g, analysis::ArenaPlan plan)
    : plan_(std::move(plan)),
      expected_(g.nodes().size()),
      workspace_(g.nodes().size(), {-1, 0}),
      block_bytes_(g.num_values(), 0) {
  for (const analysis::ArenaBlock& b : plan_.blocks) {
    if (b.owner != ir::kNoValue) block_bytes_[static_cast<size_t>(b.owner)] = b.bytes;
    if (b.owner == ir::kNoValue) workspace_[static_cast<size_t>(b.first)] = {b.offset, b.bytes};
    else expected_[static_cast<size_t>(b.first)].push_back({b.offset, b.bytes, g.type(b.owner).bytes()});
  }
}

Arena::~Arena() = default;

void Arena::allocate(const c10::Device& device) {
  if (memory_.defined() || plan_.bytes == 0) return;
  // Over-allocated by the alignment, so that every block's address is aligned
  // whatever the allocator's own alignment.
  memory_ = at::empty({plan_.bytes + plan_.alignment}, at::TensorOptions().dtype(at::kByte).device(device));
  const auto raw = reinterpret_cast<uintptr_t>(memory_.data_ptr());
  const auto a = static_cast<uintptr_t>(plan_.alignment);
  base_ = reinterpret_cast<char*>((raw + a - 1) / a * a);
}

void Arena::begin_node(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  node_ = n;
  workspace_start_ = workspace_end_ = 0;
  if (n < workspace_.size() && workspace_[n].first >= 0) {
    workspace_start_ = workspace_[n].first;
    workspace_end_ = workspace_start_ + workspace_[n].second;
  }
}

bool Arena::free_range(int64_t offset, int64_t bytes) const {
  auto it = live_.lower_bound(offset);
  if (it != live_.end() && it->first < offset + bytes) return false;
  return it == live_.begin() || std::prev(it)->second <= offset;
}

int64_t Arena::workspace_fit(int64_t bytes) const {
  int64_t from = workspace_start_;  // first fit among what the node's kernel holds in its workspace now
  for (auto it = live_.lower_bound(workspace_start_); it != live_.end() && it->first < workspace_end_; ++it) {
    if (it->first - from >= bytes) return from;
    from = std::max(from, it->second);
  }
  return workspace_end_ - from >= bytes ? from : -1;
}

void* Arena::serve(int64_t offset, int64_t bytes) {
  live_.emplace(offset, offset + bytes);
  return base_ + offset;
}

void* Arena::take(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto bytes = static_cast<int64_t>(n);
  if (pinned_.first == -2) {  // copy_to's eviction: to the allocator
    ++use_.fallback_allocations;
    use_.fallback_bytes += bytes;
    return nullptr;
  }
  if (base_ && pinned_.first >= 0) {
    MUTWO_ASSERT(bytes <= pinned_.second, "arena: {} bytes asked for a block of {}", bytes, pinned_.second);
    ++pinned_takes_;
    return serve(pinned_.first, pinned_.second);
  }
  if (base_ && node_ < expected_.size()) {
    for (const Expected& e : expected_[node_])
      if (e.exact == bytes && free_range(e.offset, e.bytes)) return serve(e.offset, e.bytes);
    const int64_t rounded = (bytes + plan_.alignment - 1) / plan_.alignment * plan_.alignment;
    if (const int64_t at = workspace_fit(rounded); at >= 0) return serve(at, rounded);
  }
  ++use_.fallback_allocations;
  use_.fallback_bytes += bytes;
  return nullptr;
}

void Arena::give_back(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto erased = live_.erase(static_cast<char*>(p) - base_);
  MUTWO_ASSERT(erased == 1, "arena: a pointer it did not serve given back");
}

bool Arena::placed(ir::ValueId v, const at::Tensor& t) const {
  // Not the arena's device (a generator's state, kept in host memory on CUDA): not its to place.
  if (!t.defined() || !t.has_storage() || (memory_.defined() && t.device().type() != memory_.device().type())) return true;
  const int64_t offset = plan_.offset[static_cast<size_t>(v)];
  return offset < 0 ? !in_arena(t) : static_cast<const char*>(t.storage().data()) == base_ + offset;
}

bool Arena::in_arena(const at::Tensor& t) const {
  const auto* p = static_cast<const char*>(t.storage().data());
  return base_ && p >= base_ && p < base_ + plan_.bytes;
}

at::Tensor Arena::copy_to(const at::Tensor& t, std::pair<int64_t, int64_t> block) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pinned_ = block;
  }
  at::Tensor moved = at::empty_strided(t.sizes(), t.strides(), t.options());
  {
    std::lock_guard<std::mutex> lock(mu_);
    pinned_ = {-1, 0};
  }
  moved.copy_(t);
  return moved;
}

bool Arena::move_home(ir::ValueId v, at::Tensor& t) {
  if (plan_.offset[static_cast<size_t>(v)] < 0) return false;
  const int64_t offset = plan_.offset[static_cast<size_t>(v)], bytes = block_bytes_[static_cast<size_t>(v)];
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int64_t>(t.storage().nbytes()) > bytes || !free_range(offset, bytes)) return false;
  }
  const int64_t takes = pinned_takes_;
  t = copy_to(t, {offset, bytes});
  MUTWO_ASSERT(placed(v, t), "arena: %{} moved to its block at {} ({} bytes) is not there: a {}-byte {} storage {}, "
               "{} the arena", v, offset, bytes, t.storage().nbytes(), t.device().str(),
               in_arena(t) ? "at " + std::to_string(static_cast<const char*>(t.storage().data()) - base_) : "outside it",
               pinned_takes_ > takes ? "taken from" : "its allocation never reached");
  std::lock_guard<std::mutex> lock(mu_);
  ++use_.moved_storages;
  return true;
}

void Arena::place(const std::vector<std::pair<ir::ValueId, at::Tensor*>>& outputs) {
  std::vector<std::pair<ir::ValueId, at::Tensor*>> away;
  for (const auto& o : outputs)
    if (!placed(o.first, *o.second)) away.push_back(o);
  // Each to its block once that is free; a block held by a sibling that is
  // itself away (two outputs of one size made in each other's block) is
  // freed by copying that sibling out to the allocator first, once.
  for (bool evicted = false; !away.empty();) {
    const size_t before = away.size();
    away.erase(std::remove_if(away.begin(), away.end(), [&](const auto& o) { return move_home(o.first, *o.second); }),
               away.end());
    if (away.size() < before) continue;
    auto sitting = std::find_if(away.begin(), away.end(), [&](const auto& o) { return in_arena(*o.second); });
    if (evicted || sitting == away.end()) break;
    *sitting->second = copy_to(*sitting->second, {-2, 0});
    evicted = true;
  }
  // What is left, out of the arena: a storage sitting in another's block (or
  // in the node's workspace) past its node would make that block's next
  // tenants fall back.
  for (const auto& o : away)
    if (in_arena(*o.second)) *o.second = copy_to(*o.second, {-2, 0});
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& o : away) use_.missed_storages += plan_.offset[static_cast<size_t>(o.first)] >= 0;
}

ArenaUse Arena::take_use() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(use_, {});
}

}  // namespace mutwo::runtime
