// What the mutwo subcommands share: validators, the options that build a
// training step, device parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <c10/core/Device.h>

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "models/model.h"

namespace mutwo::cli {

// Validators with messages a user can act on (CLI11's numeric ranges print 1.8e308).
extern const CLI::Validator kPositive;
extern const CLI::Validator kNonNegative;

// Options shared by every command that builds a training step.
struct StepOptions {
  std::string model = "mlp";
  int64_t batch = 64;
  std::string optimizer = "sgd";
  double lr = 0.01;
  std::optional<double> dropout;
  std::optional<int64_t> classes;
  std::optional<int64_t> image_size;
  std::optional<int64_t> seq;
  std::string data;

  void add_to(CLI::App& app, bool with_batch = true);
  models::ModelOptions model_options() const;
  ir::Graph build() const;  // forward + autodiff + optimizer, verified
};

// "cpu", "cuda", "cuda:N"; UserError when CUDA is asked for and missing.
c10::Device parse_device(const std::string& s);

double median(std::vector<double> v);

// A line when the allocator reserved more than 10% above what was allocated at
// the peak (fragmentation in CUDA's caching allocator); empty otherwise.
std::string fragmentation_note(int64_t allocated_peak, int64_t reserved_peak);

}  // namespace mutwo::cli
