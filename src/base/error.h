#pragma once
// Errors the runtime raises for bad input. The app maps them to one message and a non-zero exit.
#include <stdexcept>
#include <string>

namespace autooptim {

// Anything wrong with what the user gave us: files, configs, flags, shapes.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A checkpoint or tensor file that is missing, truncated or inconsistent.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// A model produced non-finite values.
class NumericError : public Error {
 public:
  using Error::Error;
};

}  // namespace autooptim
