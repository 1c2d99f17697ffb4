// A planned module step inside the user's Python process (mutwo.torch): the
// step file of a module (stepfile::load_module_step) is profiled on the
// user's own tensors, planned under a budget and rewritten; then every
// training iteration runs its forward part when the module is called and its
// backward part when autograd asks for the gradients, on mutwo's executor,
// so recomputation happens where the rewrite put it and tensors are freed
// where the liveness analysis says.
#pragma once

#include <ATen/ATen.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plan/pipeline.h"
#include "plan/plan.h"
#include "plan/plan_file.h"
#include "profile/profile.h"
#include "stepfile/step_file.h"
#include "support/units.h"

namespace mutwo::runtime {
class Executor;
}

namespace mutwo::torchext {

struct SessionOptions {
  plan::PlanOptions plan;           // the planning request (plan/pipeline.h), refusals in Python's words
  std::string profile = "measure";  // measure: run the step on the user's tensors, timed per node; flops: estimate
  int profile_iters = 2;            // measured steps after one warm-up step
  std::string label = "module";     // the model's name, for reports
  // wrap(arena=): the step served from its arena (runtime/arena.h); none: runtime::arena_by_default (CUDA, a budget).
  std::optional<bool> arena;
};
// mutwo.torch's options as it writes them (json.dumps): the planning
// request's keys (plan::read_plan_options) and "profile", "profile_iters",
// "label", "arena"; any other key (mutwo.torch's own "report") is left to it.
SessionOptions read_session_options(const std::string& options_json);

// What is live at a predicted peak, by role, leaving out roles that hold
// nothing: report()'s predicted_peak_by_role, for sessions and compiled steps.
nlohmann::json peak_by_role_json(const plan::Simulation& s);

class Session {
 public:
  // `names` and `tensors`: every parameter, buffer, input and constant of the
  // step by its graph name (qualname, "input<i>", the constant's name), as
  // they are on this first call: the profile runs on them (buffers and inputs
  // are cloned first, so the user's are not written).
  Session(const std::string& step_json, const std::vector<std::string>& names, const std::vector<at::Tensor>& tensors,
          const SessionOptions& options);
  ~Session();

  // The forward part on `primals` (parameters, buffers, inputs in the step
  // file's order; buffers are updated in place): the module's outputs.
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& primals);
  // The backward part, given d(loss)/d(output) for every output that has a
  // tangent: the gradients, in the step file's order (gradient_of()).
  std::vector<at::Tensor> backward(const std::vector<at::Tensor>& output_grads);

  // Plan, predictions and measurements as one JSON object (docs/python.md).
  std::string info_json() const;
  // profile.json, its tables and plots, plan.json, plan.csv, rewritten.ir, summary.json.
  void write_report(const std::string& dir) const;

 private:
  void bind(const std::vector<at::Tensor>& primals);
  void unbind();

  SessionOptions options_;
  c10::Device device_;
  stepfile::ModuleStep step_;            // as loaded (ids of the unplanned graph)
  plan::PlanInput input_;
  plan::Plan plan_;
  // For info_json, found once: what lowered the peak, and the activations
  // dropped or swapped, each named by module and op.
  std::vector<plan::Decision> decisions_;
  std::vector<plan::ActivationRecord> moved_;
  std::string unplanned_peak_node_;  // ops::node_label of the unplanned step's peak node
  int64_t unplanned_peak_ = 0;
  int64_t unplanned_activation_bytes_ = 0;
  ir::Graph planned_;
  std::unique_ptr<runtime::Executor> exec_;
  size_t forward_end_ = 0;                 // first backward node of planned_
  std::vector<ir::ValueId> primals_, outputs_, tangents_, gradients_;  // ids in planned_
  std::vector<size_t> tangent_output_;     // tangents_[i] is of outputs_[tangent_output_[i]]
  std::vector<bool> output_saved_;         // outputs_[i] is read by the backward part
  bool in_flight_ = false;
  // Measured per step: the module's own bytes (step_peak_), apart from what
  // the user's code between forward and backward adds (between_: the loss).
  int64_t bound_bytes_ = 0, forward_end_bytes_ = 0, held_at_forward_end_ = 0, step_peak_ = 0;
  int64_t steps_ = 0, measured_peak_ = 0, last_measured_peak_ = 0, between_ = 0, last_between_ = 0;
};

}  // namespace mutwo::torchext
