#pragma once
// The runtime's typed options: the settings that are not techniques (dtype, threads, oneDNN), and every
// acceleration technique's own options struct, off by default, held by type in a TechniqueOptions store.
// Each struct lives in a torch-free header beside its technique (techniques/<family>/<name>_options.h, e.g.
// FusedQkvOptions in kernel/fused_qkv_options.h) and is read as opts.of<FusedQkvOptions>(); the technique registry
// (techniques/registry.h) binds each manifest flag to a field of one. A default-constructed RuntimeOptions
// is the baseline.
#include <cstdint>
#include <string>

#include "runtime/technique_options.h"

namespace autooptim::runtime {

struct RuntimeOptions {
  std::string dtype = "bf16";   // "bf16" | "fp32" | "fp64": the transformer's compute dtype (see
                                // compute_dtype: the CPU runs bf16 manifests in fp32)
  int64_t cpu_threads = 0;      // 0 = libtorch's own setting (OMP_NUM_THREADS, else its default)
  bool onednn = true;           // oneDNN (MKL-DNN) CPU kernels where libtorch would pick them
  TechniqueOptions techniques;  // each technique's options, by type

  // The options of technique T (a default T when none were set).
  template <class T>
  const T& of() const {
    return techniques.get<T>();
  }
  // The options of technique T to set.
  template <class T>
  T& of() {
    return techniques.edit<T>();
  }
};

}  // namespace autooptim::runtime
