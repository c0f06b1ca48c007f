// Every technique registered at an extension point, against the point's reference computation, over a
// table of shapes (the approach of llama.cpp's test-backend-ops): registering a technique at one of these
// points gives it this test, with no test to write. Each override runs with its technique switched on
// through the registry (its switch flag set to a non-default value) on the machine's device: on a GPU the
// CUDA kernels take the calls; on a machine without one they decline (nullopt) and only overrides that run
// on the CPU are compared. On a GPU, an override that declines every shape of its point's table fails: the
// table no longer covers it.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/torch_compat.h"
#include "runtime/device.h"
#include "runtime/extension_points.h"
#include "runtime/forward_context.h"
#include "runtime/nn.h"
#include "runtime/techniques/registry.h"
#include "runtime/wan_vae.h"

using namespace autooptim;
using namespace autooptim::runtime;

namespace {

at::Device device() { return cuda_available() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU); }
at::TensorOptions f32() { return at::TensorOptions().device(device()).dtype(at::kFloat); }
at::Tensor bf16_randn(at::IntArrayRef shape, double scale = 1.0) {
  return (at::randn(shape, f32()) * scale).to(at::kBFloat16);
}

// Options with `technique` switched on: its switch flag set to the first value that differs from the
// default (true, the lowest non-default integer, the first other choice). Null for a technique the
// registry does not know (a test's own).
std::optional<RuntimeOptions> switched_on(const std::string& technique) {
  const techniques::Technique* t = techniques::find(technique);
  if (!t) return std::nullopt;
  const techniques::FlagSpec* f = t->flag(t->switch_flag.substr(t->group.empty() ? 0 : t->group.size() + 1));
  if (!f) return std::nullopt;
  RuntimeOptions o;
  const nlohmann::json def = f->default_value();
  switch (f->type) {
    case techniques::FlagType::kBool:
      f->set(o, !def.get<bool>());
      break;
    case techniques::FlagType::kInt:
      for (int64_t v = f->int_min; v <= f->int_max; ++v)
        if (v != def.get<int64_t>()) {
          f->set(o, v);
          break;
        }
      break;
    case techniques::FlagType::kChoice:
      for (const auto& c : f->choices)
        if (c != def.get<std::string>()) {
          f->set(o, c);
          break;
        }
      break;
    default:
      return std::nullopt;
  }
  return o;
}

// A lossy technique (FP8) is held to a looser bound than one that only reorders bf16 rounding.
double tolerance(const std::string& technique) {
  const techniques::Technique* t = techniques::find(technique);
  return t && t->family == "quant" ? 0.08 : 0.01;
}

// What one call of one override gave on one shape: its output and the reference's, or nothing (declined).
struct Outcome {
  at::Tensor got, ref;
};

// Runs `call` for every override of `point` over `shapes` and compares each result with the reference.
template <typename Fn, typename Shape>
void check_point(const ext::Point<Fn>& point, const std::vector<Shape>& shapes,
                 const std::function<std::optional<Outcome>(const Fn&, const Shape&, ForwardContext&)>& call,
                 const std::function<std::string(const Shape&)>& label) {
  for (const auto& ov : point.overrides()) {
    const std::optional<RuntimeOptions> opts = switched_on(ov.technique);
    if (!opts) continue;  // not a registered technique
    ASSERT_TRUE(ov.on(*opts)) << ov.technique << " is not on with its switch flag set";
    Trace trace;
    ForwardContext fc;
    fc.options = &*opts;
    fc.trace = &trace;
    int64_t took = 0;
    for (const auto& s : shapes) {
      at::manual_seed(7);
      const std::optional<Outcome> r = call(ov.fn, s, fc);
      if (!r) continue;
      ++took;
      const double err = rel_l2(r->got.to(at::kFloat).cpu(), r->ref.to(at::kFloat).cpu());
      EXPECT_LT(err, tolerance(ov.technique)) << ov.technique << " at " << point.name() << ", " << label(s);
    }
    // On a GPU every registered override must take some shape of its point's table.
    if (cuda_available())
      EXPECT_GT(took, 0) << ov.technique << " declined every shape of " << point.name() << "'s table";
  }
}

struct Tokens {
  int64_t B, L, D;
  bool per_token;  // modulation [B, L, 6, D] rather than [B, 6, D]
};
const std::vector<Tokens> kTokenShapes = {
    {1, 301, 3072, true}, {2, 37, 3072, false}, {2, 13, 96, true}, {1, 8, 128, false}};
std::string tokens_label(const Tokens& s) {
  return std::to_string(s.B) + "x" + std::to_string(s.L) + "x" + std::to_string(s.D) +
         (s.per_token ? " per token" : " per sample");
}

at::Tensor modulation_table(const Tokens& s) { return at::randn({1, 6, s.D}, f32()) * 0.1; }
at::Tensor modulation_proj(const Tokens& s) {
  return s.per_token ? bf16_randn({s.B, s.L, 6, s.D}, 0.2) : bf16_randn({s.B, 6, s.D}, 0.2);
}
// mod[k] broadcastable against [B, L, D], float32.
at::Tensor modulation(const at::Tensor& table, const at::Tensor& tproj, int64_t k) {
  if (tproj.dim() == 4) return (table.unsqueeze(0) + tproj.to(at::kFloat)).select(2, k);
  return (table + tproj.to(at::kFloat)).select(1, k).unsqueeze(1);
}
at::Tensor norm_modulate_ref(const at::Tensor& x, const at::Tensor& table, const at::Tensor& tproj) {
  return (layer_norm_fp32(x, 1e-6) * (1 + modulation(table, tproj, 4)) + modulation(table, tproj, 3))
      .to(x.scalar_type());
}

}  // namespace

TEST(TechniquePoints, NormModulate) {
  check_point<ext::NormModulateFn, Tokens>(
      ext::points().norm_modulate, kTokenShapes,
      [](const ext::NormModulateFn& fn, const Tokens& s, ForwardContext& fc) -> std::optional<Outcome> {
        const at::Tensor x = bf16_randn({s.B, s.L, s.D}, 3.0), table = modulation_table(s), tproj = modulation_proj(s);
        auto got = fn(x, table, tproj, 3, 4, 1e-6, &fc);
        if (!got) return std::nullopt;
        return Outcome{*got, norm_modulate_ref(x, table, tproj)};
      },
      tokens_label);
}

TEST(TechniquePoints, GateResidual) {
  check_point<ext::GateResidualFn, Tokens>(
      ext::points().gate_residual, kTokenShapes,
      [](const ext::GateResidualFn& fn, const Tokens& s, ForwardContext& fc) -> std::optional<Outcome> {
        const at::Tensor res = bf16_randn({s.B, s.L, s.D}), branch = bf16_randn({s.B, s.L, s.D}),
                         table = modulation_table(s), tproj = modulation_proj(s);
        auto got = fn(res, branch, table, tproj, 2, &fc);
        if (!got) return std::nullopt;
        const at::Tensor ref =
            (res.to(at::kFloat) + branch.to(at::kFloat) * modulation(table, tproj, 2)).to(res.scalar_type());
        return Outcome{*got, ref};
      },
      tokens_label);
}

TEST(TechniquePoints, AffineNorm) {
  check_point<ext::AffineNormFn, Tokens>(
      ext::points().affine_norm, kTokenShapes,
      [](const ext::AffineNormFn& fn, const Tokens& s, ForwardContext& fc) -> std::optional<Outcome> {
        const at::Tensor x = bf16_randn({s.B, s.L, s.D}, 2.0);
        const at::Tensor w = 1 + at::randn({s.D}, f32()) * 0.1, b = at::randn({s.D}, f32()) * 0.1;
        auto got = fn(x, w, b, 1e-6, &fc);
        if (!got) return std::nullopt;
        return Outcome{*got, layer_norm_fp32(x, 1e-6, w, b).to(x.scalar_type())};
      },
      tokens_label);
}

TEST(TechniquePoints, ResidualNormModulate) {
  check_point<ext::ResidualNormModulateFn, Tokens>(
      ext::points().residual_norm_modulate, kTokenShapes,
      [](const ext::ResidualNormModulateFn& fn, const Tokens& s, ForwardContext& fc) -> std::optional<Outcome> {
        const at::Tensor x = bf16_randn({s.B, s.L, s.D}), y = bf16_randn({s.B, s.L, s.D}), table = modulation_table(s),
                         tproj = modulation_proj(s);
        auto got = fn(x, y, table, tproj, 3, 4, 1e-6, &fc);
        if (!got) return std::nullopt;
        const at::Tensor sum = x + y;
        // Both results in one comparison: the sum and its normalised, modulated form.
        return Outcome{at::cat({got->first.flatten(), got->second.flatten()}),
                       at::cat({sum.flatten(), norm_modulate_ref(sum, table, tproj).flatten()})};
      },
      tokens_label);
}

namespace {

struct LinearShape {
  int64_t B, L, in, out;
};
const std::vector<LinearShape> kLinearShapes = {{1, 301, 3072, 3072}, {2, 37, 3072, 1024}, {1, 13, 96, 160}};
std::string linear_label(const LinearShape& s) {
  return std::to_string(s.B) + "x" + std::to_string(s.L) + " " + std::to_string(s.in) + "->" + std::to_string(s.out);
}
Linear bf16_linear(const LinearShape& s) {
  Linear lin(s.in, s.out, true, at::TensorOptions().device(device()).dtype(at::kBFloat16));
  lin->weight.copy_(at::randn({s.out, s.in}, f32()) / std::sqrt(static_cast<double>(s.in)));
  lin->bias.copy_(at::randn({s.out}, f32()) * 0.1);
  return lin;
}
at::Tensor linear_ref(const Linear& lin, const at::Tensor& x) {
  return at::linear(x.to(at::kFloat), lin->weight.to(at::kFloat), lin->bias.to(at::kFloat));
}

}  // namespace

TEST(TechniquePoints, Linear) {
  check_point<ext::LinearFn, LinearShape>(
      ext::points().linear, kLinearShapes,
      [](const ext::LinearFn& fn, const LinearShape& s, ForwardContext& fc) -> std::optional<Outcome> {
        const Linear lin = bf16_linear(s);
        const at::Tensor x = bf16_randn({s.B, s.L, s.in});
        auto got = fn(lin, x, &fc);
        if (!got) return std::nullopt;
        return Outcome{*got, linear_ref(lin, x)};
      },
      linear_label);
}

TEST(TechniquePoints, LinearGelu) {
  check_point<ext::LinearGeluFn, LinearShape>(
      ext::points().linear_gelu, kLinearShapes,
      [](const ext::LinearGeluFn& fn, const LinearShape& s, ForwardContext& fc) -> std::optional<Outcome> {
        const Linear lin = bf16_linear(s);
        const at::Tensor x = bf16_randn({s.B, s.L, s.in});
        auto got = fn(lin, x, &fc);
        if (!got) return std::nullopt;
        return Outcome{*got, at::gelu(linear_ref(lin, x), "tanh")};
      },
      linear_label);
}

namespace {

struct Heads {
  int64_t B, H, Lq, Lk, d;
};
const std::vector<Heads> kAttentionShapes = {{1, 24, 301, 301, 128}, {2, 4, 37, 512, 128}, {1, 3, 77, 77, 64}};
std::string heads_label(const Heads& s) {
  return std::to_string(s.B) + "x" + std::to_string(s.H) + " heads, " + std::to_string(s.Lq) + "x" +
         std::to_string(s.Lk) + " tokens, d " + std::to_string(s.d);
}

}  // namespace

TEST(TechniquePoints, Attention) {
  check_point<ext::AttentionFn, Heads>(
      ext::points().attention, kAttentionShapes,
      [](const ext::AttentionFn& fn, const Heads& s, ForwardContext& fc) -> std::optional<Outcome> {
        const at::Tensor q = bf16_randn({s.B, s.H, s.Lq, s.d}), k = bf16_randn({s.B, s.H, s.Lk, s.d}),
                         v = bf16_randn({s.B, s.H, s.Lk, s.d});
        auto got = fn(q, k, v, &fc);
        if (!got) return std::nullopt;
        // The point's reference is the model's own attention in bf16 (libtorch's default kernel), not exact
        // float32 math: on a CPU without AVX-512 BF16, libtorch 1.13's bf16 attention is 1 to 3% from float32
        // whatever the backend (seen on an AVX2-only EPYC), and an override is judged against what it replaces.
        return Outcome{*got, compat::sdpa(q, k, v)};
      },
      heads_label);
}

namespace {

struct Voxels {
  int64_t B, C, T, H, W;
};
const std::vector<Voxels> kVaeShapes = {{1, 256, 2, 16, 22}, {1, 96, 1, 7, 9}, {2, 32, 3, 5, 4}};
std::string voxels_label(const Voxels& s) {
  return std::to_string(s.B) + "x" + std::to_string(s.C) + "x" + std::to_string(s.T) + "x" + std::to_string(s.H) + "x" +
         std::to_string(s.W);
}

}  // namespace

TEST(TechniquePoints, VaeNormSilu) {
  const auto& point = ext::points().vae_norm_silu;
  for (const auto& ov : point.overrides()) {
    const std::optional<RuntimeOptions> opts = switched_on(ov.technique);
    if (!opts) continue;
    Trace trace;
    VaeRun run;
    run.options = &*opts;
    run.trace = &trace;
    for (const auto& s : kVaeShapes) {
      at::manual_seed(7);
      WanRMSNorm norm(s.C, false, f32());
      norm->gamma.copy_(1 + at::randn_like(norm->gamma) * 0.1);
      const at::Tensor x = bf16_randn({s.B, s.C, s.T, s.H, s.W}, 2.0);
      auto got = ov.fn(x, norm->gamma, at::Tensor(), run);
      if (!got) continue;
      const at::Tensor ref = at::silu(norm->forward(x.to(at::kFloat)));
      EXPECT_LT(rel_l2(got->to(at::kFloat).cpu(), ref.cpu()), tolerance(ov.technique))
          << ov.technique << " at " << point.name() << ", " << voxels_label(s);
    }
  }
}

// The suite covers what it claims: the points it walks have techniques registered, so a registration that
// moved to another point shows here rather than silently leaving the table.
TEST(TechniquePoints, TheTablesPointsHaveRegisteredOverrides) {
  const auto& p = ext::points();
  EXPECT_FALSE(p.norm_modulate.overrides().empty());
  EXPECT_FALSE(p.gate_residual.overrides().empty());
  EXPECT_FALSE(p.affine_norm.overrides().empty());
  EXPECT_FALSE(p.residual_norm_modulate.overrides().empty());
  EXPECT_FALSE(p.linear.overrides().empty());
  EXPECT_FALSE(p.linear_gelu.overrides().empty());
  EXPECT_FALSE(p.attention.overrides().empty());
  EXPECT_FALSE(p.vae_norm_silu.overrides().empty());
}
