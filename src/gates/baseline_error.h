#pragma once
#include "base/error.h"

namespace autooptim::gates {

// A baseline that cannot be trusted (slower than the machine's calibration or its records allow, a
// cached output that a fresh run contradicts): an error of the run (exit 2), never a verdict.
class BaselineError : public Error {
 public:
  using Error::Error;
};

}  // namespace autooptim::gates
