// (being written) the optimal planner: Checkmate's MILP solved with COIN-OR CBC.
#include "plan/plan.h"
#include "support/error.h"

namespace mutwo::plan {

Plan plan_optimal(const PlanInput& in, int64_t budget) {
  MUTWO_FAIL("the optimal planner is not built yet");
}

}  // namespace mutwo::plan
