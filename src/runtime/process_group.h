// The process group of a data-parallel step: c10d's ProcessGroupGloo (CPU) or
// ProcessGroupNCCL (CUDA) over a TCPStore, as torchrun's environment describes
// it, behind the data-parallel kernels' interface (kernels/collectives.h).
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/collectives.h"

namespace mutwo::runtime {

// What torchrun tells each process (the CLI reads it from the environment).
struct Launch {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The store's server runs in torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True):
  // every rank is a client. Otherwise rank 0 serves it.
  bool agent_store = false;
  std::string gloo_interface;  // GLOO_SOCKET_IFNAME; empty: loopback for a local master, else the host's address
};

class ProcessGroup final : public kernels::Collectives {
 public:
  // Joins the group (blocks until every rank has): NCCL for a CUDA device,
  // Gloo for the CPU. UserError when the backend is missing from this libtorch.
  ProcessGroup(const Launch& launch, c10::Device device);
  ~ProcessGroup() override;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const std::string& backend() const { return backend_; }
  void all_reduce_start(int64_t bucket, at::Tensor flat) override;
  void reduce_scatter_start(int64_t bucket, at::Tensor flat) override;
  void wait(int64_t bucket) override;
  void all_gather(const at::Tensor& shard, at::Tensor out) override;

  // Host numbers, element by element over the ranks (blocking): the mean, the largest.
  std::vector<double> mean(std::vector<double> values);
  std::vector<double> max(std::vector<double> values);
  void barrier();

 private:
  struct Impl;
  std::vector<double> reduce(std::vector<double> values, bool mean);
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int world_ = 1;
  std::string backend_;
};

// The group executors use when their options name none (ExecutorOptions::collectives):
// set once by the command line after it joined, null in a one-process run.
void set_process_group(ProcessGroup* group);
ProcessGroup* process_group();

}  // namespace mutwo::runtime
