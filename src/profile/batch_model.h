// How a step's profile grows with the batch (max-batch's model): from steps
// measured at one or two batches, the profile at any other batch without
// running it. Bytes come from the step built at that batch (its liveness and
// the workspaces its ops declare: exact); what was measured beyond them is
// modelled as linear in the batch, as are node times.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "profile/profile.h"

namespace mutwo::profile {

class BatchModel {
 public:
  // `device`: for the roofline estimate that stands in while no profile is added.
  explicit BatchModel(std::string device) : device_(std::move(device)) {}

  // A measured profile of `g`, the step at `measured.batch` (> 0).
  void add(const ir::Graph& g, const Profile& measured);
  size_t points() const { return points_.size(); }
  bool has(int64_t batch) const;

  // The profile of `g`, the step at `batch`. Per node: its time and the
  // workspace it took beyond what its op declares, linear in the batch through
  // the two measured batches nearest `batch` (with one: the time proportional
  // to the batch, the workspace as measured); the bytes the device held beyond
  // the graph's tensors as at the nearest measured batch. With nothing
  // measured, or where `g`'s nodes are not the measured step's (another op or
  // phase at some rank), the roofline estimate (estimate_profile).
  Profile at(const ir::Graph& g, int64_t batch) const;

 private:
  struct Point {
    int64_t batch = 0;
    Profile profile;
    std::vector<double> ms;
    std::vector<int64_t> extra_workspace;             // measured workspace less the declared one
    std::vector<int64_t> beyond_before, beyond_after;  // measured live bytes less the liveness analysis's
  };
  std::string device_;
  std::vector<Point> points_;  // by batch
};

}  // namespace mutwo::profile
