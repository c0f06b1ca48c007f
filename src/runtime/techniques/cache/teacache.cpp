// Cache technique: TeaCache-style block cache, per CFG branch (see teacache.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/techniques/registry.h"
#include "runtime/techniques/cache/teacache_options.h"

namespace autooptim::runtime::techniques {
namespace {

// Least-squares polynomial of `degree` through (x, y), lowest order first; the identity when there are
// too few points or the system is singular.
std::vector<double> fit_polynomial(const std::vector<double>& x, const std::vector<double>& y, int degree) {
  const int n = degree + 1;
  if (x.size() < static_cast<size_t>(3 * n)) return {0.0, 1.0};
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));  // normal equations [A | b]
  for (size_t k = 0; k < x.size(); ++k) {
    std::vector<double> p(2 * n, 1.0);
    for (int i = 1; i < 2 * n; ++i) p[i] = p[i - 1] * x[k];
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) a[i][j] += p[i + j];
      a[i][n] += p[i] * y[k];
    }
  }
  for (int c = 0; c < n; ++c) {  // Gauss-Jordan with partial pivoting
    int piv = c;
    for (int r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    if (std::abs(a[piv][c]) < 1e-12) return {0.0, 1.0};
    std::swap(a[c], a[piv]);
    for (int r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int j = c; j <= n; ++j) a[r][j] -= f * a[c][j];
    }
  }
  std::vector<double> coef(n);
  for (int i = 0; i < n; ++i) coef[i] = a[i][n] / a[i][i];
  return coef;
}

}  // namespace

AUTOOPTIM_TECHNIQUE(teacache) {
  Technique t;
  t.name = "teacache";
  t.family = "cache";
  t.lossless = false;
  t.summary =
      "TeaCache-style: accumulated, polynomial-rescaled relative change of block 0's modulated input "
      "decides per CFG branch when the block stack reuses its cached residual";
  t.group = "teacache";
  t.flags = {
      bool_flag("enabled", field(&TeaCacheOptions::enabled), "turns the policy on"),
      number_flag("threshold", field(&TeaCacheOptions::threshold), 0.0, true, 10.0, false,
                  "accumulated estimated change before the block stack is computed again"),
      int_flag("warmup_steps", field(&TeaCacheOptions::warmup_steps), 0, 1000, "first steps always computed"),
      bool_flag("dense_last_step", field(&TeaCacheOptions::dense_last_step), "the last step always computed"),
      number_list_flag("coefficients", field(&TeaCacheOptions::coefficients), -1e6, 1e6, 8,
                       "rescaling polynomial, lowest order first (from the calibration)"),
      bool_flag("calibrate", field(&TeaCacheOptions::calibrate),
                "compute every step and record (input change, output change) for the fit"),
  };
  t.switch_flag = "teacache.enabled";
  t.exclusive_group = "step_cache";
  t.hooks = {"transformer.blocks"};
  t.engagement = {{"cache.teacache.skipped_forwards", "teacache is on but no block stack was skipped"}};
  t.check_counters = [](const RuntimeOptions&, const Trace& tr, std::vector<std::string>& out) {
    const double decided = tr.get("cache.teacache.computed_forwards") + tr.get("cache.teacache.skipped_forwards");
    if (decided != tr.get("transformer.forwards"))
      out.push_back("teacache: its computed and skipped forwards disagree with the transformer's forwards");
  };
  t.check_flags = [](const RuntimeOptions& o) -> std::optional<FlagProblem> {
    if (o.of<TeaCacheOptions>().coefficients.empty())
      return FlagProblem{".coefficients", "needs at least one coefficient"};
    return std::nullopt;
  };
  t.calibration = Calibration{{{"teacache", {{"calibrate", true}}}}, [](const std::vector<Trace>& traces) {
                                // Pairs (input change, output change) of both branches at every step of every run.
                                std::vector<double> x, y;
                                const std::string in = "cache.teacache.calibration.input.",
                                                  out = "cache.teacache.calibration.output.";
                                for (const auto& tr : traces)
                                  for (const auto& [key, v] : tr.counters())
                                    if (key.rfind(in, 0) == 0 && tr.has(out + key.substr(in.size()))) {
                                      x.push_back(v);
                                      y.push_back(tr.get(out + key.substr(in.size())));
                                    }
                                return nlohmann::json{{"teacache", {{"coefficients", fit_polynomial(x, y, 2)}}}};
                              }};
  t.warmup_steps = [](RuntimeOptions& o) -> int64_t& { return o.of<TeaCacheOptions>().warmup_steps; };
  t.dense_last_step = [](const RuntimeOptions& o) { return o.of<TeaCacheOptions>().dense_last_step; };
  t.search = [](const SearchContext& c) {
    const int64_t warmup = std::max<int64_t>(1, c.steps / 10);
    std::vector<SearchPoint> p;
    for (double th : {0.1, 0.2, 0.4}) {
      char label[32];
      std::snprintf(label, sizeof label, "teacache-t%g", th);
      p.push_back({label, {{"teacache", {{"enabled", true}, {"threshold", th}, {"warmup_steps", warmup}}}}});
    }
    return p;
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/techniques/cache/teacache.h"

namespace autooptim::runtime::techniques {

TeaCache::TeaCache(const TeaCacheOptions& o, int64_t steps, Trace* trace)
    : CachePolicy("teacache", steps, trace), o_(o) {}

double TeaCache::estimate(double x) const {
  double y = 0, p = 1;
  for (double c : o_.coefficients) y += c * p, p *= x;
  return std::max(0.0, y);  // a fitted polynomial can dip below zero near x = 0; a change cannot
}

at::Tensor TeaCache::blocks(const BlockStack& s, const at::Tensor& h, int64_t step, int branch) {
  Branch& b = branch_[branch];
  const at::Tensor input = s.modulated_input(h).to(at::kFloat);
  const double change = b.prev_input.defined() ? relative_l1(input, b.prev_input) : -1.0;
  bool compute = o_.calibrate || step < o_.warmup_steps || (o_.dense_last_step && last_step(step)) || change < 0 ||
                 !b.residual.defined();
  if (!compute) {
    b.acc += estimate(change);
    compute = b.acc >= o_.threshold;
  }
  b.prev_input = input;
  decided(step, branch, !compute);
  if (!compute) return (h.to(at::kFloat) + b.residual).to(h.scalar_type());
  const at::Tensor out = run_blocks(s, h, 0, s.layers);
  const at::Tensor out32 = out.to(at::kFloat);
  if (o_.calibrate) {
    if (change >= 0 && b.prev_out.defined()) {
      record("input", branch, step, change);
      record("output", branch, step, relative_l1(out32, b.prev_out));
    }
    b.prev_out = out32;
  }
  b.residual = out32 - h.to(at::kFloat);
  b.acc = 0;
  return out;
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
