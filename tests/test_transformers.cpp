// (being written) tests of the transformers models.
#include <gtest/gtest.h>
