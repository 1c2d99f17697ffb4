// (being written) the bert model builders.
#include "models/model.h"
