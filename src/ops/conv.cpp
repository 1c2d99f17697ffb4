// (being written) op rows of the conv family.
#include "ops/op.h"

namespace mutwo::ops {

void add_conv_ops(std::vector<OpDef>& t) {}

}  // namespace mutwo::ops
