// What run and optimize say of the arena (--arena): the refusal when it
// passes the device's cap, its line and its JSON keys.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "analysis/arena.h"
#include "runtime/executor.h"

namespace mutwo::cli {

// Under --device-memory: when the persistent state and the arena pass the cap,
// says so on stderr with the planned size and returns kExitInfeasible; else 0.
int refuse_arena_over_cap(const runtime::Executor& ex, const c10::Device& device);

// "arena: 12.3 MiB (...)", and the keys arena_bytes, arena_live_peak_bytes,
// arena_order, arena_left_out, arena_fallback_allocations,
// arena_fallback_bytes, arena_moved_storages, arena_missed_storages.
std::string arena_line(const analysis::ArenaPlan& a, const runtime::ArenaUse& u);
void add_arena_json(nlohmann::json& j, const analysis::ArenaPlan& a, const runtime::ArenaUse& u);

}  // namespace mutwo::cli
