#pragma once
// The message of the error a call throws, "" when it throws none: what a test compares. E is the error type the
// call must throw (autooptim::Error; a CheckpointError where a loader must say that the file is bad); another
// type propagates and fails the test.
#include <functional>
#include <string>

#include "base/error.h"

namespace autooptim::test {

template <class E = autooptim::Error>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace autooptim::test
