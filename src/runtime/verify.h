#pragma once
// Golden-vector verification: runs each component found in a folder of reference outputs
// (<name>_weights.{json,safetensors} with <name>_io.{json,safetensors}) and compares every output.
#include <ATen/ATen.h>

#include <string>

#include "runtime/options.h"
#include <vector>

#include "runtime/wan_transformer.h"
#include "runtime/wan_vae.h"

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
  double tolerance = 1e-5;  // per tensor, relative L2, for the transformer in precision.compute
  // The VAE, text encoder and scheduler run in float32 as in the reference whatever the transformer's
  // dtype; their tolerance (pipelines get 10x, for the drift through the steps).
  double fp32_tolerance = 1e-5;
  // Technique switches for the transformer's forward (default: the baseline), so that a kernel switch
  // can be checked against the reference's vectors.
  RuntimeOptions options;
};

struct VerifyReport {
  std::vector<VerifyRow> rows;
  std::vector<std::string> skipped;  // pairs of a kind this build cannot run, with the reason
  bool all_pass() const;
};

// One component's files in a golden folder.
struct GoldenPair {
  std::string name;                                // e.g. vae_tiny
  std::string weights_json, weights, io_json, io;  // full paths (weights may not exist, e.g. unipc)
};

// A verifier runs the component of one pair and appends a row per reference tensor.
using Verifier = void (*)(const GoldenPair&, const VerifyOptions&, VerifyReport&);

// Verifiers of each component kind, chosen by the pair name's prefix (each in its component's file).
void verify_transformer(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep);
void verify_unipc(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep);
void verify_vae(const GoldenPair&, const VerifyOptions&, VerifyReport&);
void verify_umt5(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep);      // in umt5.cpp
void verify_pipeline(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep);  // in verify_pipeline.cpp
// The two-expert pipelines (in verify_a14b.cpp); their weights are named by the io json.
void verify_a14b_pipeline(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep);

// A golden folder's component: `json` holds {"config": ...} (the checkpoint's config.json values), `weights`
// its tensors. CheckpointError names the file of a missing config or a mismatched tensor.
WanTransformer3DModel load_golden_transformer(const std::string& json, const std::string& weights, const Precision& p);
AutoencoderKLWan load_golden_vae(const std::string& json, const std::string& weights, const at::Device& device);
// The file `name` a golden json (`json_path`) names beside itself; `name` must be [A-Za-z0-9._-] without a
// leading dot (CheckpointError naming `what` otherwise).
std::string golden_sibling(const std::string& json_path, const std::string& name, const std::string& what);

// Throws Error when the folder has no pairs or a pair's files are unreadable.
VerifyReport verify_golden_dir(const std::string& dir, const VerifyOptions& opts);

// The comparison itself: rel L2 and max |a-b| of a against reference b (float64).
VerifyRow compare(const std::string& component, const std::string& name, const at::Tensor& ours, const at::Tensor& ref,
                  double tolerance);

}  // namespace autooptim::runtime
