// Liveness: where each value is defined, last used and freed, and how many
// bytes are live around every node. The one definition of "last use" in
// mutwo: the executor frees by it, the profiler reports it and the simulator
// predicts memory from it.
//
// Storage model: every output of a `view` op shares the storage of its input 0; a
// storage is freed after the last use of any value aliasing it. Persistent
// values (inputs, parameters, optimizer state, buffers) are never freed; graph
// outputs are held until the end of the step. A storage made by an op tagged
// kHost (swap_out) lives in host memory: it is counted apart (host_*), never
// in the device's live bytes; so is persistent state that only swap_in and
// swap_into read (optimizer state kept in host memory between steps).
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace mutwo::analysis {

inline constexpr int32_t kForever = INT32_MAX;

struct Liveness {
  // Per value.
  std::vector<int32_t> def;          // producing node; -1 for values without a producer
  std::vector<int32_t> last_use;     // last node reading the value itself; def if none; kForever if held
  std::vector<ir::ValueId> storage;  // the value owning the storage this one uses (itself unless a view)
  std::vector<int32_t> storage_end;  // for storage owners: the node after which the storage is freed
  // Per node.
  std::vector<std::vector<ir::ValueId>> release_after;  // values whose own last use is this node
  std::vector<int64_t> live_before;  // bytes live just before the node runs
  std::vector<int64_t> live_during;  // live_before + the new storages it makes (workspace excluded)
  std::vector<int64_t> live_after;   // after the node and its releases
  int64_t persistent_bytes = 0;      // live across steps
  int64_t peak_bytes = 0;            // max of live_during (persistent_bytes if no nodes)
  int32_t peak_node = -1;
  // Host memory (swap_out's copies): per storage owner, whether it lives
  // there; and the most bytes held there at once.
  std::vector<bool> on_host;
  int64_t host_persistent_bytes = 0;  // persistent state kept there (within host_peak_bytes)
  int64_t host_peak_bytes = 0;

  bool owns_storage(ir::ValueId v) const { return storage[static_cast<size_t>(v)] == v; }
};

Liveness analyze_liveness(const ir::Graph& g);

// The role a storage's bytes are charged to, per storage owner (entries of
// values that own no storage are unspecified): the one rule behind a profile's
// live_by_role and peak_by_role and the simulator's peak breakdown.
// Activation when any value sharing the storage is an activation and its owner
// is not persistent, or when a recompute node made it (a clone brings a dropped
// activation back); a storage swap_in copies back as an activation before
// the optimizer, else as the storage its swap_out copied out (a gradient);
// otherwise the owner's role.
std::vector<ir::Role> charged_roles(const ir::Graph& g, const Liveness& L);

}  // namespace mutwo::analysis
