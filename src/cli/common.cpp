// What the mutwo subcommands share (see common.h).
#include "cli/common.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "ir/text.h"
#include "ops/op.h"
#include "stepfile/step_file.h"

#include "autodiff/autodiff.h"
#include "cli/ranks.h"
#include "dist/data_parallel.h"
#include "runtime/memory.h"
#include "support/error.h"
#include "support/units.h"

namespace mutwo::cli {


// Validators with messages a user can act on (CLI11's numeric ranges print 1.8e308).
const CLI::Validator kPositive = CLI::Validator(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || v <= 0) return "must be a positive integer, got '" + s + "'";
      return {};
    },
    "POSITIVE");
const CLI::Validator kNonNegative = CLI::Validator(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      double v = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || !(v >= 0)) return "must be a number >= 0, got '" + s + "'";
      return {};
    },
    "NUMBER>=0");

namespace {

// A validator from a parser that throws UserError: its message, without the "mutwo: " main adds.
template <class Parse>
CLI::Validator from_parser(Parse parse, const char* what) {
  return CLI::Validator(
      [parse](std::string& s) -> std::string {
        try {
          parse(s);
        } catch (const UserError& e) {
          return e.what();
        }
        return {};
      },
      what);
}

}  // namespace

void check_planner(const std::string& name) {
  const auto& names = plan::planner_names();
  MUTWO_CHECK(std::find(names.begin(), names.end(), name) != names.end(), "unknown planner '{}'; planners: {}", name,
              fmt::join(names, ", "));
}

const CLI::Validator kSize = from_parser([](const std::string& s) { parse_bytes(s); }, "SIZE");
const CLI::Validator kSizeOrFree = from_parser([](const std::string& s) { if (s != "free") parse_bytes(s); }, "SIZE|free");
const CLI::Validator kBudget = from_parser([](const std::string& s) { parse_budget(s); }, "BUDGET");
const CLI::Validator kPlanner = from_parser(check_planner, "PLANNER");

namespace {

const std::vector<std::string> kDumpablePasses = {"autodiff",  "reinplace", "data-parallel",
                                                  "recompute", "update-early", "swap"};

// Is `pass` among `passes` ("all", or a comma-separated list)?
bool dump_wanted(const std::string& passes, std::string_view pass) {
  if (passes == "all") return true;
  std::stringstream list(passes);
  for (std::string p; std::getline(list, p, ',');)
    if (p == pass) return true;
  return false;
}

const CLI::Validator kPassList = CLI::Validator(
    [](std::string& s) -> std::string {
      if (s == "all") return {};
      std::stringstream list(s);
      for (std::string p; std::getline(list, p, ',');)
        if (std::find(kDumpablePasses.begin(), kDumpablePasses.end(), p) == kDumpablePasses.end())
          return fmt::format("unknown pass '{}'; passes: {}, or all", p, fmt::join(kDumpablePasses, ", "));
      return {};
    },
    "PASS[,PASS...]|all");

}  // namespace


void SwapOptions::add_to(CLI::App& app) {
  app.add_flag("--no-swap", no_swap, "plan with recomputation only: never swap to host memory");
  app.add_option("--host-memory", host_memory,
                 "host memory the swapped copies may hold at once: 8GiB, 500MiB (default: half the machine's on CUDA; "
                 "none on the CPU, whose tensors are in host memory already)")
      ->check(kSize);
}

void SwapOptions::apply_to(plan::PlanOptions& o) const {
  o.swap = !no_swap;
  if (!host_memory.empty()) {
    try {
      o.host_limit_bytes = parse_bytes(host_memory);
    } catch (const UserError& e) {
      MUTWO_FAIL("--host-memory {}: {}", host_memory, e.what());
    }
  }
}

void IrDump::add_to(CLI::App& app) {
  app.add_option("--dump-ir-after", state_->passes,
                 "print the graph after these passes on stderr, as IR text: autodiff, reinplace, data-parallel, "
                 "recompute, update-early, swap (comma-separated), or all")
      ->check(kPassList);
}

void IrDump::operator()(std::string_view pass, const ir::Graph& g) const {
  State& d = *state_;
  if (d.passes.empty()) return;
  std::string text = ir::print(g);
  if (dump_wanted(d.passes, pass)) {
    if (text == d.last) fmt::print(stderr, "# IR after {} ({}): unchanged\n", pass, g.name);
    else fmt::print(stderr, "# IR after {} ({})\n{}", pass, g.name, text);
  }
  d.last = std::move(text);
}

void StepOptions::add_to(CLI::App& app, bool with_batch, bool with_graph) {
    dump_ir_after.add_to(app);
    std::string names;
    for (const auto& m : models::model_list()) names += (names.empty() ? "" : ", ") + m.name;
    // What builds a zoo model; a --graph file fixes all of it, so they exclude each other.
    std::vector<CLI::Option*> shape;
    shape.push_back(app.add_option("--model", model, "model to build: " + names)->capture_default_str());
    if (with_batch) {
      std::string defaults;
      for (const auto& m : models::model_list())
        if (m.batch != batch) defaults += fmt::format("; {} for {}", m.batch, m.name);
      CLI::Option* b = app.add_option("--batch", batch, fmt::format("batch size (default {}{})", batch, defaults))
                           ->check(kPositive);
      shape.push_back(b);
      // The model's own default (models::default_batch) once --model is known.
      app.final_callback([this, b] {
        if (b->count() == 0 && graph.empty()) batch = models::default_batch(model);
      });
    }
    app.add_option("--optimizer", optimizer, "sgd (momentum 0.9), adam or adamw")
        ->capture_default_str()
        ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
    app.add_option("--lr", lr, "learning rate")->capture_default_str()->check(kNonNegative);
    shape.push_back(app.add_option("--dropout", dropout, "dropout probability (model default if unset)")->check(CLI::Range(0.0, 0.999)));
    shape.push_back(app.add_option("--classes", classes, "number of classes (model default if unset)")->check(CLI::Range(2, 1 << 30)));
    shape.push_back(app.add_option("--image-size", image_size, "image height and width (ResNet; default 224)")->check(kPositive));
    shape.push_back(app.add_option("--seq", seq, "sequence length (BERT 128, GPT-2 1024, transformer-lm 20 by default)")
        ->check(kPositive));
    shape.push_back(app.add_option("--data", data,
                                   "text file (byte tokens) for transformer-lm and gpt2-*: train walks it in batches; "
                                   "run, optimize and the rest take one fixed batch of it")
                        ->check(CLI::ExistingFile));
    shape.push_back(app.add_option("--pad", pad,
                                   "BERT: the last N positions of every sequence are padding, masked out of attention "
                                   "(attention_mask) and of the MLM loss")
                        ->check(CLI::Range(int64_t{0}, int64_t{1} << 30)));
    shape.push_back(app.add_option("--head", head,
                                   "BERT: mlm (the masked-LM head and its cross-entropy, default) or none (the encoder "
                                   "alone, loss = sum of the last hidden state)")
                        ->check(CLI::IsMember({"mlm", "none"})));
    app.add_flag("--shard-optimizer", shard_optimizer,
                 "on several ranks (torchrun): reduce-scatter the gradients, keep optimizer state for this rank's "
                 "slice of the parameters only, all-gather the parameters (ZeRO stages 1 and 2)");
    app.add_option("--bucket-size", bucket_size,
                   "on several ranks: gradients per all-reduce (or reduce-scatter) bucket, launched as soon as the "
                   "backward pass made them")
        ->capture_default_str()
        ->check(kSize);
    if (with_graph) {
      CLI::Option* g = app.add_option("--graph", graph,
                     "train this step instead of --model: a captured step (step.json, from python -m mutwo.capture) "
                     "or IR text (optimize's rewritten.ir); it fixes the model and batch")
          ->check(CLI::ExistingFile);
      for (CLI::Option* o : shape) g->excludes(o);
      app.add_flag("--no-fuse-loss", no_fuse_loss,
                   "with a step.json: keep its vocabulary projection and cross-entropy as captured instead of one "
                   "linear_cross_entropy (whose logits never exist whole; docs/step-file.md)")
          ->needs(g);
    }
  }

std::string StepOptions::name(const ir::Graph& g) const { return graph.empty() ? model : g.name; }

std::string StepOptions::what() const {
  return graph.empty() ? fmt::format("{} batch {}", model, batch) : graph;
}

models::ModelOptions StepOptions::model_options() const {
    models::ModelOptions mo;
    mo.name = model;
    mo.batch = batch;
    mo.dropout = dropout;
    mo.classes = classes;
    mo.image_size = image_size;
    mo.seq = seq;
    mo.data = data;
    mo.pad = pad;
    mo.head = head;
    return mo;
  }

ir::Graph StepOptions::build() const {
    autodiff::OptimizerConfig oc;
    oc.kind = optimizer == "sgd" ? autodiff::Optimizer::sgd
              : optimizer == "adam" ? autodiff::Optimizer::adam
                                    : autodiff::Optimizer::adamw;
    oc.lr = lr;
    if (oc.kind == autodiff::Optimizer::adamw) oc.weight_decay = 0.01;
    const int64_t bucket = parse_bytes(bucket_size);
    MUTWO_CHECK(bucket > 0, "--bucket-size must be positive, got {}", bucket_size);
    ir::Graph g;
    if (!graph.empty()) {
      stepfile::LoadOptions lo;
      lo.fuse_loss = !no_fuse_loss;
      g = stepfile::load_graph_file(graph, oc, lo);
    } else {
      models::Model m = models::build_model(model_options());
      g = autodiff::build_training_step(std::move(m.graph), m.loss, oc, dump_ir_after);
    }
    if (world_size() == 1) {
      MUTWO_CHECK(!shard_optimizer, "--shard-optimizer needs several ranks: launch under torchrun --nproc-per-node N "
                                    "--no-python mutwo ...");
      return g;
    }
    for (const ir::Node& n : g.nodes())
      if (ops::has(n, ops::kCollective)) return g;  // already one rank's step (optimize's rewritten.ir)
    g = dist::data_parallel(g, {world_size(), bucket, shard_optimizer});
    dump_ir_after("data-parallel", g);
    return g;
  }

c10::Device parse_device(const std::string& s) {
  const char* hint = "use cpu or cuda (cuda:N)";
  MUTWO_CHECK(s == "cpu" || s.rfind("cuda", 0) == 0, "unknown device '{}'; {}", s, hint);
  c10::Device d(c10::DeviceType::CPU);
  try {
    d = c10::Device(s);
  } catch (const c10::Error&) {
    MUTWO_FAIL("unknown device '{}'; {}", s, hint);
  }
  if (d.is_cuda()) {
    std::string why;
    MUTWO_CHECK(runtime::cuda_available(&why), "--device {}: {}", s, why);
  }
  return d;
}

std::string fragmentation_note(int64_t allocated_peak, int64_t reserved_peak) {
  if (allocated_peak <= 0 || reserved_peak * 10 <= allocated_peak * 11) return "";
  return fmt::format(
      "fragmentation: the allocator reserved {} at its peak, {:.0f}% above the {} allocated (budgets apply to "
      "allocated bytes; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True usually narrows the gap)",
      format_bytes(reserved_peak), 100.0 * static_cast<double>(reserved_peak - allocated_peak) / static_cast<double>(allocated_peak),
      format_bytes(allocated_peak));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

c10::Device open_device(const std::string& device, const std::string& memory) {
  c10::Device dev = parse_device(device);
  if (dev.is_cpu()) runtime::track_cpu_memory();
  runtime::start_device(dev);
  if (!memory.empty()) runtime::set_memory_limit(dev, device_memory_bytes(dev, memory));
  return dev;
}

int64_t device_memory_bytes(const c10::Device& dev, const std::string& memory) {
  if (memory != "free") return parse_bytes(memory);
  MUTWO_CHECK(dev.is_cuda(), "--device-memory free means what is free on a CUDA card: add --device cuda, or give a "
                             "size (e.g. 8GiB)");
  return runtime::available_device_bytes(dev);
}

void DeviceOptions::add_to(CLI::App& app, const char* seed_help) {
  app.add_option("--device", name, "cpu or cuda")->capture_default_str();
  app.add_option("--device-memory", memory,
                 "cap what this process may hold on the device (e.g. 8GiB), as a card that size would; on the CPU "
                 "too; `free`: what the card has free now (CUDA)")
      ->check(kSizeOrFree);
  app.add_option("--seed", seed, seed_help)->capture_default_str();
}

int64_t DeviceOptions::memory_cap(const c10::Device& opened) const {
  return memory.empty() ? 0 : runtime::memory_limit(opened);
}

CLI::Option* BudgetOptions::add_to(CLI::App& app, const char* budget_help, const char* planner_help) {
  CLI::Option* b = app.add_option("--budget", budget, budget_help)->check(kBudget);
  app.add_option("--planner", planner, planner_help)->capture_default_str()->check(kPlanner);
  return b;
}

plan::PlanOptions BudgetOptions::plan_options(bool progress) const {
  plan::PlanOptions o;
  o.planner = planner;
  o.progress = progress;
  if (!budget.empty()) o.budget = parse_budget(budget);
  swap.apply_to(o);
  return o;
}

void ArenaOptions::add_to(CLI::App& app, const char* what, const char* detail) {
  CLI::Option* arena = app.add_flag(
      "--arena", on,
      fmt::format("serve {} from one arena planned ahead from its liveness and each node's measured workspace "
                  "(docs/budgets.md); the default on CUDA wherever a budget or memory cap applies, off on the CPU, "
                  "where it only costs{}{}",
                  what, *detail ? "; " : "", detail));
  app.add_flag("--no-arena", off, "leave every allocation to the device's allocator, on CUDA too")->excludes(arena);
}

void OutputOptions::add_to(CLI::App& app, const char* json_help, bool with_quiet) {
  app.add_flag("--json", json, json_help);
  if (with_quiet) app.add_flag("--quiet", quiet, "no progress lines on stderr");
}

}  // namespace mutwo::cli
