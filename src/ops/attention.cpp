// (being written) op rows of the attention family.
#include "ops/op.h"

namespace mutwo::ops {

void add_attention_ops(std::vector<OpDef>& t) {}

}  // namespace mutwo::ops
