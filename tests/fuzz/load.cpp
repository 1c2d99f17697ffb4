// mutwo_load: the in-process loader of the fuzzer (tests/fuzz/fuzz.py). It
// reads a manifest, one `KIND PATH` per line (a file, or stdin), and runs on
// each file, in this one process, what the CLI runs on it before any tensor
// exists, with the CLI's default options:
//   profile PATH  as `mutwo plan --profile PATH --budget 100%`: read, prepare,
//                 the mutwo planner, plan.json and plan.csv written to --out
//   plan PATH     as `mutwo optimize --plan PATH --model M --batch B`: read,
//                 the zoo step built, checked, applied to its estimated profile
//                 (the CLI measures one), the plan's rewrite verified
//   graph PATH    as `mutwo run --graph PATH`: a step file with its tensor
//                 file's index, or IR text, loaded and verified
// For each file it prints one JSON line, flushed before the next is read:
//   {"path": PATH, "outcome": "ok" | "user_error" | "error", "message": ...}
// A user_error's message is the line the CLI prints on stderr (exit 2). Any
// other exception ("error": the CLI's exit 1) breaks the contract: the
// driver goes on, then exits 1. A crash stops it: the file being loaded is
// the manifest's first without a line. ATen-free: it links only the core of
// src/aten_free.txt, so the sanitizer job builds it without libtorch.
//   mutwo_load [--model M] [--batch B] [--out DIR] [MANIFEST]
// (--model and --batch default to the fuzzer's plan seed: transformer-lm, 2.)
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include "autodiff/autodiff.h"
#include "models/model.h"
#include "plan/pipeline.h"
#include "plan/plan.h"
#include "plan/plan_file.h"
#include "profile/profile.h"
#include "stepfile/step_file.h"
#include "support/error.h"

namespace {

using namespace mutwo;

struct Options {
  std::string model = "transformer-lm";  // the plan kind's step: optimize's --model and --batch
  int64_t batch = 2;
  std::string out;  // where the profile kind writes its plan (nothing when empty)
};

// `mutwo plan --profile PATH --budget 100% --out OUT/plan.json` (cli/plan_cmd.cpp).
void load_profile(const std::string& path, const Options& o) {
  plan::PlannedStep p = plan::prepare_file(path, {});
  plan::PlanOptions po;
  po.budget = Budget::of_fraction(1.0);
  plan::choose_plan(p, po);
  if (o.out.empty()) return;
  plan::write_plan_json(p.input, p.plan, p.unplanned_peak, o.out + "/plan.json");
  plan::write_plan_csv(p.input, p.plan, o.out + "/plan.csv");
}

// The zoo step `optimize --model M --batch B` builds (cli/common.cpp,
// StepOptions::build: the default optimizer) and its planners' input, from
// an estimated profile; made once.
struct ZooStep {
  ir::Graph graph;
  plan::PlannedStep planned;
};
const ZooStep& zoo_step(const Options& o) {
  static std::optional<ZooStep> step;
  if (!step) {
    models::ModelOptions mo;
    mo.name = o.model;
    mo.batch = o.batch;
    models::Model m = models::build_model(mo);
    ir::Graph g = autodiff::build_training_step(std::move(m.graph), m.loss, autodiff::OptimizerConfig{});
    plan::PlannedStep planned = plan::prepare(profile::estimate_profile(g, "cpu"), {});
    step = ZooStep{std::move(g), std::move(planned)};
  }
  return *step;
}

// `mutwo optimize --plan PATH --model M --batch B` up to its runs (cli/optimize_cmd.cpp, apply_saved_plan).
void load_plan(const std::string& path, const Options& o) {
  const plan::SavedPlan saved = plan::read_plan(path);
  const ZooStep& step = zoo_step(o);
  plan::check_saved(saved, path, o.model, o.batch, step.graph);
  const plan::Plan p = plan::apply_saved(step.planned.input, saved, path);
  plan::rewrite_plan(step.planned.input, p, {/*verify=*/true, {}});
}

// `mutwo run --graph PATH` up to its runs (cli/common.cpp, StepOptions::build: the default optimizer).
void load_graph(const std::string& path) { stepfile::load_graph_file(path, autodiff::OptimizerConfig{}, {}); }

void print(const std::string& path, const char* outcome, const std::string& message) {
  const nlohmann::ordered_json line{{"path", path}, {"outcome", outcome}, {"message", message}};
  // Paths and messages quote the files' bytes, which need not be UTF-8.
  std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

// Loads one file; false when it broke the contract.
bool load(const std::string& kind, const std::string& path, const Options& o) {
  try {
    if (kind == "profile") load_profile(path, o);
    else if (kind == "plan") load_plan(path, o);
    else load_graph(path);
    print(path, "ok", "");
  } catch (const UserError& e) {
    print(path, "user_error", user_error_line(e));
  } catch (const std::exception& e) {
    print(path, "error", e.what());
    return false;
  }
  return true;
}

int usage(const std::string& why) {
  std::fprintf(stderr, "mutwo_load: %s\nusage: mutwo_load [--model M] [--batch B] [--out DIR] [MANIFEST]\n"
                       "  MANIFEST (default: stdin): one 'KIND PATH' per line; KIND is profile, plan or graph\n",
               why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string manifest = "-";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--model" || arg == "--batch" || arg == "--out") && i + 1 == argc) return usage(arg + " needs a value");
    if (arg == "--model") o.model = argv[++i];
    else if (arg == "--batch") o.batch = std::atoll(argv[++i]);
    else if (arg == "--out") o.out = argv[++i];
    else if (arg.rfind("--", 0) == 0) return usage("unknown option " + arg);
    else manifest = arg;
  }
  if (o.batch <= 0) return usage("--batch needs a positive integer");
  std::ifstream file;
  if (manifest != "-") {
    file.open(manifest);
    if (!file) return usage("cannot read the manifest " + manifest);
  }
  std::istream& in = manifest == "-" ? std::cin : file;
  bool kept = true;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    const std::string kind = line.substr(0, space);
    if (space == std::string::npos || (kind != "profile" && kind != "plan" && kind != "graph"))
      return usage("not 'KIND PATH' with KIND profile, plan or graph: " + line);
    kept = load(kind, line.substr(space + 1), o) && kept;
  }
  return kept ? 0 : 1;
}
