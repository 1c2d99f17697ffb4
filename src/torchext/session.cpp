// A planned module step in the user's process (see session.h).
#include "torchext/session.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "ir/text.h"
#include "profile/profiler.h"
#include "report/report.h"
#include "report/snapshot.h"
#include "rewrite/recompute.h"
#include "runtime/executor.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "support/files.h"
#include "support/json_input.h"
#include "support/units.h"
#include "plan/plan_file.h"
#include "plan/pipeline.h"

namespace mutwo::torchext {

namespace {

using json = nlohmann::json;

// The executor runs ATen ops as captured: without autograd recording them
// (the surrounding autograd.Function owns the gradient) and without autocast
// casting them again (a step captured under autocast has its casts as nodes).
struct RunGuard {
  at::NoGradGuard no_grad;
  c10::impl::ExcludeDispatchKeyGuard no_autocast{c10::autocast_dispatch_keyset};
};

ir::ValueId find(const ir::Graph& g, const std::string& name) {
  const ir::ValueId v = g.find(name);
  MUTWO_ASSERT(v != ir::kNoValue, "%{} is not in the planned graph", name);
  return v;
}

}  // namespace

SessionOptions read_session_options(const std::string& options_json) {
  const std::string where = "mutwo.torch's options";
  const json j = parse_json_input(options_json, where);
  SessionOptions o;
  o.plan = plan::read_plan_options(j, where);
  o.plan.python = true;
  auto given = [&](const char* key) { return j.contains(key) && !j.at(key).is_null(); };
  if (given("profile")) o.profile = json_field<std::string>(j, "profile", where);
  if (given("profile_iters")) o.profile_iters = json_field<int>(j, "profile_iters", where);
  if (given("label")) o.label = json_field<std::string>(j, "label", where);
  if (given("arena")) o.arena = json_field<bool>(j, "arena", where);
  return o;
}

Session::Session(const std::string& step_json, const std::vector<std::string>& names, const std::vector<at::Tensor>& tensors,
                 const SessionOptions& options)
    : options_(options), device_(c10::kCPU) {
  MUTWO_ASSERT(names.size() == tensors.size(), "{} names for {} tensors", names.size(), tensors.size());
  step_ = stepfile::load_module_step(step_json, options_.label);
  const ir::Graph& g = step_.graph;
  std::map<std::string, at::Tensor> given;
  for (size_t i = 0; i < names.size(); ++i) {
    MUTWO_CHECK(g.find(names[i]) != ir::kNoValue, "the step has no tensor named {}", names[i]);
    given[names[i]] = tensors[i];
  }
  // The module's device: that of its tensors, where 0-dimensional CPU tensors
  // (scalars, which PyTorch mixes into any device's ops, as Hugging Face's T5
  // does) may sit beside them.
  auto scalar_on_cpu = [](const at::Tensor& t) { return t.is_cpu() && t.dim() == 0; };
  for (const at::Tensor& t : tensors)
    if (!scalar_on_cpu(t)) {
      device_ = t.device();
      break;
    }
  for (const at::Tensor& t : tensors)
    MUTWO_CHECK(t.device() == device_ || scalar_on_cpu(t),
                "the module's tensors are on {} and {}: mutwo.torch runs a module on one device (0-dimensional CPU "
                "tensors aside); move the module and its inputs to one device",
                device_.str(), t.device().str());
  if (device_.is_cpu()) runtime::track_cpu_memory();

  // Phase 1: the profile, on the user's tensors (buffers and inputs cloned:
  // the profiling steps must not move running statistics).
  profile::Profile prof;
  if (options_.profile == "measure") {
    profile::ProfileOptions po;
    po.device = device_.str();
    po.iters = std::max(1, options_.profile_iters);
    po.progress = false;
    po.model = options_.label;
    po.graph_only = true;
    po.initialize = [&](runtime::Executor& ex) {
      std::map<std::string, at::Tensor> mine;
      for (const auto& [name, t] : given) mine[name] = g.value(g.find(name)).role == ir::Role::parameter ? t : t.clone();
      ex.initialize(mine);
    };
    RunGuard guard;  // the user's parameters require grad: autograd must not record (and keep) the profiling steps
    prof = profile::profile_step(g, po);
  } else {
    MUTWO_CHECK(options_.profile == "flops", "profile='{}': use 'measure' (run and time the step once) or 'flops' (estimate)",
                options_.profile);
    prof = profile::estimate_profile(g, device_.str());
    prof.model = options_.label;
  }

  // Phases 2 and 3: the plan and its rewrite, run by the executor part by part.
  plan::PlannedStep planned = plan::plan_and_rewrite(prof, options_.plan);
  if (!planned.plan.feasible) throw plan::BudgetError(plan::infeasible_text(planned, options_.plan));
  input_ = std::move(planned.input);
  unplanned_peak_ = planned.unplanned_peak;
  unplanned_activation_bytes_ = planned.unplanned_activation_bytes;
  plan_ = std::move(planned.plan);
  decisions_ = plan::decisions(input_, plan_);
  for (plan::ActivationRecord& a : plan::activation_records(input_, plan_))
    if (a.decision != "keep") moved_.push_back(std::move(a));
  unplanned_peak_node_ = plan::simulate(input_, {}).peak_label;
  // The arena's workspaces: each rewritten node's origin's, as profiled.
  std::vector<int64_t> workspace;
  for (int32_t origin : planned.rewritten.origin)
    workspace.push_back(origin >= 0 && static_cast<size_t>(origin) < input_.workspace.size()
                            ? input_.workspace[static_cast<size_t>(origin)] : 0);
  planned_ = std::move(planned.rewritten.graph);
  const auto& nodes = planned_.nodes();
  forward_end_ = nodes.size();
  for (size_t n = 0; n < nodes.size(); ++n)
    if (ir::is_backward(nodes[n].phase)) {
      forward_end_ = n;
      break;
    }
  for (size_t n = forward_end_; n < nodes.size(); ++n)
    MUTWO_ASSERT(ir::is_backward(nodes[n].phase), "forward node {} after the backward part began", n);
  auto planned_id = [&](ir::ValueId v) { return find(planned_, g.value(v).name); };
  for (ir::ValueId v : step_.primals) primals_.push_back(planned_id(v));
  for (ir::ValueId v : step_.outputs) outputs_.push_back(planned_id(v));
  for (const auto& [pos, t] : step_.tangents) {
    tangent_output_.push_back(pos);
    tangents_.push_back(planned_id(t));
  }
  for (const auto& [p, gv] : step_.gradients) gradients_.push_back(planned_id(gv));
  for (ir::ValueId v : outputs_) {
    bool saved = false;
    for (size_t n = forward_end_; n < nodes.size() && !saved; ++n)
      saved = std::count(nodes[n].inputs.begin(), nodes[n].inputs.end(), v) > 0;
    output_saved_.push_back(saved);
  }
  runtime::ExecutorOptions eo;
  eo.device = device_;
  eo.keep_outputs = true;
  eo.default_generator = true;  // dropout draws as eager PyTorch would, from the user's RNG
  eo.arena = options_.arena.value_or(runtime::arena_by_default(device_, options_.plan.budget.kind != Budget::Kind::none));
  if (eo.arena) eo.arena_workspace = std::move(workspace);
  exec_ = std::make_unique<runtime::Executor>(planned_, eo);
  for (ir::ValueId v : step_.constants) {
    const std::string& name = g.value(v).name;
    exec_->bind(find(planned_, name), given.at(name));
  }
}

Session::~Session() = default;

json peak_by_role_json(const plan::Simulation& s) {
  json by_role = json::object();
  for (size_t r = 0; r < s.peak_by_role.size(); ++r)
    if (s.peak_by_role[r] > 0) by_role[std::string(ir::to_string(static_cast<ir::Role>(r)))] = s.peak_by_role[r];
  return by_role;
}

void Session::bind(const std::vector<at::Tensor>& primals) {
  MUTWO_CHECK(primals.size() == primals_.size(), "the step takes {} tensors (parameters, buffers, inputs), given {}",
              primals_.size(), primals.size());
  bound_bytes_ = 0;
  for (size_t i = 0; i < primals.size(); ++i) {
    const at::Tensor& t = primals[i];
    // Shared, never copied: a copy on another device would take the gradient away from the user's tensor.
    MUTWO_CHECK(!t.defined() || t.device() == device_, "%{} is on {}, but the plan was made on {}",
                planned_.value(primals_[i]).name, t.device().str(), device_.str());
    exec_->bind(primals_[i], t);
    bound_bytes_ += static_cast<int64_t>(t.numel() * t.element_size());
  }
}

void Session::unbind() {
  for (ir::ValueId v : primals_) exec_->value(v).reset();
  for (ir::ValueId v : tangents_) exec_->value(v).reset();
  in_flight_ = false;
}

std::vector<at::Tensor> Session::forward(const std::vector<at::Tensor>& primals) {
  if (in_flight_) unbind();  // the last forward's backward never ran (its graph was dropped)
  bind(primals);
  RunGuard guard;
  runtime::reset_peak(device_);
  const int64_t start = runtime::memory_stats(device_).current;
  exec_->run(0, forward_end_);
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    at::Tensor& slot = exec_->value(outputs_[i]);
    out.push_back(slot);
    if (!output_saved_[i]) slot.reset();  // the user holds it; the executor need not
  }
  // The module's own bytes: what it allocated above what the process held
  // when it began, plus the tensors it was given.
  const runtime::MemoryStats s = runtime::memory_stats(device_);
  forward_end_bytes_ = s.current;
  step_peak_ = s.peak - start + bound_bytes_;
  held_at_forward_end_ = s.current - start + bound_bytes_;
  runtime::reset_peak(device_);  // from here to backward(): the user's code (the loss)
  in_flight_ = true;
  return out;
}

std::vector<at::Tensor> Session::backward(const std::vector<at::Tensor>& output_grads) {
  MUTWO_CHECK(in_flight_, "backward without a forward: each backward() needs the module called first");
  MUTWO_CHECK(output_grads.size() == tangents_.size(), "the step takes {} output gradients, given {}", tangents_.size(),
              output_grads.size());
  int64_t tangent_bytes = 0;
  for (size_t i = 0; i < tangents_.size(); ++i) {
    exec_->value(tangents_[i]) = output_grads[i];
    tangent_bytes += static_cast<int64_t>(output_grads[i].numel() * output_grads[i].element_size());
  }
  // What the user's code between the two parts added at its most: reported, not counted as the module's.
  const runtime::MemoryStats between = runtime::memory_stats(device_);
  last_between_ = between.peak - forward_end_bytes_;
  between_ = std::max(between_, last_between_);
  runtime::reset_peak(device_);
  {
    RunGuard guard;
    exec_->run(forward_end_, planned_.nodes().size());
  }
  std::vector<at::Tensor> grads;
  for (ir::ValueId v : gradients_) grads.push_back(std::move(exec_->value(v)));
  for (ir::ValueId v : outputs_) exec_->value(v).reset();
  // The backward part's peak above the process at its start, on top of what
  // the module held at the forward's end and the output gradients it was given.
  const runtime::MemoryStats s = runtime::memory_stats(device_);
  step_peak_ = std::max(step_peak_, s.peak - between.current + held_at_forward_end_ + tangent_bytes);
  last_measured_peak_ = step_peak_;
  measured_peak_ = std::max(measured_peak_, last_measured_peak_);
  ++steps_;
  unbind();
  return grads;
}

std::string Session::info_json() const {
  json dropped = json::array();
  for (ir::ValueId v : plan_.drop) dropped.push_back(input_.graph.value(v).name);
  json moved = json::array(), decided = json::array();
  for (const plan::ActivationRecord& a : moved_)
    moved.push_back({{"name", a.name}, {"module", a.module}, {"op", a.op}, {"label", a.label()}, {"bytes", a.bytes},
                     {"decision", a.decision}});
  for (const plan::Decision& d : decisions_)
    decided.push_back({{"kind", d.kind}, {"count", d.count}, {"bytes", d.bytes}, {"peak_without_bytes", d.peak_without_bytes},
                       {"lowered_bytes", d.lowered_bytes}, {"text", d.text}, {"line", plan::decision_line(d)}});
  json j{{"model", options_.label},
         {"device", device_.str()},
         {"planner", options_.plan.planner},
         {"profile", options_.profile},
         {"arena", exec_->arena_plan() != nullptr},
         {"arena_from", !options_.arena ? "default" : *options_.arena ? "arena=True" : "arena=False"},
         {"arena_bytes", exec_->arena_plan() ? json(exec_->arena_plan()->bytes) : json()},
         {"budget", options_.plan.budget.kind == Budget::Kind::none ? json() : json(budget_text(options_.plan.budget))},
         {"unplanned_activation_bytes", unplanned_activation_bytes_},
         {"budget_bytes", plan_.budget_bytes},
         {"feasible", plan_.feasible},
         {"unplanned_peak_bytes", unplanned_peak_},
         {"predicted_peak_bytes", plan_.predicted.peak_bytes},
         {"predicted_peak_by_role", peak_by_role_json(plan_.predicted)},
         {"predicted_extra_ms", plan_.predicted.extra_ms},
         {"profiled_step_ms", input_.profile.step_ms},
         {"profiled_step_ms_min", input_.profile.step_ms_min},
         {"profiled_step_ms_max", input_.profile.step_ms_max},
         {"profile_iterations", options_.profile == "measure" ? std::max(1, options_.profile_iters) : 0},
         {"dropped", dropped},
         {"dropped_bytes", plan::dropped_bytes(input_.graph, plan_)},
         {"recompute_nodes", plan_.predicted.recompute_nodes},
         {"swapped", plan_.swap.size()},
         {"host_peak_bytes", plan_.predicted.host_peak_bytes},
         {"nodes", planned_.nodes().size()},
         {"forward_nodes", forward_end_},
         {"steps", steps_},
         {"measured_peak_bytes", steps_ ? json(measured_peak_) : json()},
         {"last_measured_peak_bytes", steps_ ? json(last_measured_peak_) : json()},
         {"measured_between_bytes", steps_ ? json(between_) : json()},
         {"note", plan_.note},
         {"moved", moved},
         {"decisions", decided},
         {"unplanned_peak_node", unplanned_peak_node_},
         {"predicted_peak_node", plan_.predicted.peak_label}};
  return j.dump();
}

void Session::write_report(const std::string& dir) const {
  report::write_profile_dir(input_.profile, dir);
  plan::write_plan_json(input_, plan_, unplanned_peak_, dir + "/plan.json");
  plan::write_plan_csv(input_, plan_, dir + "/plan.csv");
  report::write_plan_report(input_.profile, plan::read_plan(dir + "/plan.json"), dir);  // as mutwo report --plan
  write_file(dir + "/rewritten.ir", ir::print(planned_));
  report::write_memory_snapshot(report::plan_memory(input_, plan_), dir + "/" + report::kPlanSnapshot);
  write_file(dir + "/summary.json", json::parse(info_json()).dump(2) + "\n");
}

}  // namespace mutwo::torchext
