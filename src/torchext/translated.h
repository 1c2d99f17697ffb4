// mutwo's errors as the extension's operators raise them: RuntimeError whose
// text starts with "mutwo: " (the user's mistake, one line) or "mutwo budget: "
// (no plan fits), which python/mutwo/_ext.py turns into MutwoError and BudgetError.
#pragma once

#include <stdexcept>
#include <string>

#include "plan/pipeline.h"
#include "support/error.h"

namespace mutwo::torchext {

// Runs f, turning mutwo's errors into the one-line messages mutwo.torch reads.
template <class F>
auto translated(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const plan::BudgetError& e) {
    throw std::runtime_error(std::string("mutwo budget: ") + e.what());
  } catch (const UserError& e) {
    throw std::runtime_error(std::string("mutwo: ") + e.what());
  }
}

}  // namespace mutwo::torchext
