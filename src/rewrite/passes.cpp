// The rewrite pass manager (see passes.h).
#include "rewrite/passes.h"

#include <exception>

#include "ops/op.h"
#include "support/error.h"

namespace mutwo::rewrite {

Rewritten run_passes(Rewritten r, const std::vector<Pass>& passes, const PassOptions& o) {
  for (const Pass& pass : passes) {
    r = pass.run(r);
    if (o.verify) {
      try {
        ops::verify(r.graph);
      } catch (const std::exception& e) {
        MUTWO_ASSERT(false, "the {} pass made a graph that does not verify: {}", pass.name, e.what());
      }
    }
    if (o.after) o.after(pass.name, r.graph);
  }
  return r;
}

}  // namespace mutwo::rewrite
