// (being written) tests of the resnet models.
#include <gtest/gtest.h>
