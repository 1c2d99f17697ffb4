// Data-parallel runs under torchrun (README "Several GPUs"): torchrun's
// environment read once, the process group joined and made the process's, and
// what a command does differently on several ranks (rank 0 speaks, the others
// write their files under rank<r>/, losses are the mean over the ranks).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "runtime/process_group.h"

namespace mutwo::cli {

// torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; nullopt
// unless WORLD_SIZE is above 1. UserError for values that are not numbers.
std::optional<runtime::Launch> launch_from_env();

// Joins the group (blocks until every rank has) on `device` ("cuda" becomes
// "cuda:LOCAL_RANK"; an explicit index is refused) and makes it the process's
// (runtime::set_process_group). Ranks above 0 print nothing on stdout from then on.
void join_ranks(const runtime::Launch& launch, std::string& device);
// After a command succeeded: waits for every rank, then leaves the group.
void leave_ranks();

runtime::ProcessGroup* ranks();  // null in one process
int rank();                      // 0 in one process
int world_size();                // 1 in one process
// `out` on rank 0 and in one process, `out/rank<r>` elsewhere.
std::string rank_dir(const std::string& out);
// The mean over the ranks (as is in one process): losses, each rank's over its rows.
std::vector<double> rank_mean(std::vector<double> values);
// rank and world_size, plus the data-parallel settings on several ranks.
void add_rank_json(nlohmann::json& j);

}  // namespace mutwo::cli
