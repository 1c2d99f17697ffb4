// (being written) the gpt model builders.
#include "models/model.h"
