// mutwo show: prints a model's training-step graph (or its forward graph
// alone, before autodiff) in the IR's text form (docs/ir.md).
#include <fmt/format.h>

#include "cli/commands.h"
#include "ir/text.h"
#include "models/model.h"

namespace mutwo::cli {

void ShowCommand::add_to(CLI::App& app) {
  step.add_to(app);
  app.add_flag("--forward", forward_only, "print only the forward graph (before autodiff)");
}

int ShowCommand::run() const {
  if (forward_only) {
    fmt::print("{}", ir::print(models::build_model(step.model_options()).graph));
  } else {
    fmt::print("{}", ir::print(step.build()));
  }
  return 0;
}

}  // namespace mutwo::cli
