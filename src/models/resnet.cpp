// (being written) the resnet model builders.
#include "models/model.h"
