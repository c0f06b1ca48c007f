#pragma once
// Precompiled header of the runtime targets: the heavy, stable third-party headers only.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <nlohmann/json.hpp>
