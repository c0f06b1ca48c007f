#pragma once
// Golden-vector verification: runs each component found in a folder of reference outputs
// (<name>_weights.{json,safetensors} with <name>_io.{json,safetensors}) and compares every output.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "runtime/wan_transformer.h"

namespace autooptim::runtime {

struct VerifyRow {
  std::string component;  // the pair's name, e.g. transformer_tiny
  std::string tensor;     // the reference tensor's key, e.g. inter.blocks.0.out
  double rel_l2 = 0;
  double max_abs = 0;
  double tolerance = 0;
  bool pass = false;
};

struct VerifyOptions {
  Precision precision;      // device and compute dtype the components run in
  double tolerance = 1e-5;  // per tensor, relative L2; pipelines get 10x
};

struct VerifyReport {
  std::vector<VerifyRow> rows;
  std::vector<std::string> skipped;  // pairs of a kind this build cannot run, with the reason
  bool all_pass() const;
};

// Throws Error when the folder has no pairs or a pair's files are unreadable.
VerifyReport verify_golden_dir(const std::string& dir, const VerifyOptions& opts);

// The comparison itself: rel L2 and max |a-b| of a against reference b (float64).
VerifyRow compare(const std::string& component, const std::string& name, const at::Tensor& ours,
                  const at::Tensor& ref, double tolerance);

}  // namespace autooptim::runtime
