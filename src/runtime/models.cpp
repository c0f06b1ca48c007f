#include "runtime/models.h"

#include <fcntl.h>
#include <unistd.h>
#include <cstdlib>

#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/checkpoint.h"
#include "base/error.h"
#include "models/model_table.h"

namespace fs = std::filesystem;

namespace autooptim::embedded {
extern const unsigned char kTinyTokenizer[];
extern const std::size_t kTinyTokenizer_size;
}  // namespace autooptim::embedded

namespace autooptim::runtime {
namespace {

// FNV-1a: a stable per-name seed (std::hash is not stable across standard libraries).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

at::ScalarType compute_dtype(const std::string& dtype, const at::Device& device) {
  if (dtype == "fp64") return at::kDouble;
  if (dtype == "fp32") return at::kFloat;
  if (dtype == "bf16") return device.is_cuda() ? at::kBFloat16 : at::kFloat;
  throw Error("unknown dtype '" + dtype + "' (bf16, fp32, fp64)");
}

std::vector<std::string> known_models() { return models::model_names(); }

const std::string& tiny_tokenizer_model() {
  static const std::string bytes(reinterpret_cast<const char*>(embedded::kTinyTokenizer),
                                 embedded::kTinyTokenizer_size);
  return bytes;
}

ModelConfigs ti2v_5b_configs() {
  ModelConfigs c;
  c.transformer = WanTransformerConfig::ti2v_5b();
  c.vae = WanVAEConfig::ti2v_5b();
  c.text_encoder = UMT5Config::umt5_xxl();
  return c;
}

ModelConfigs configs_of(const models::ModelFacts& facts) {
  if (!facts.architecture) return ti2v_5b_configs();
  ModelConfigs c;
  c.transformer = WanTransformerConfig::from_json(facts.architecture->transformer);
  c.vae = WanVAEConfig::from_json(facts.architecture->vae);
  c.text_encoder = UMT5Config::from_json(facts.architecture->text_encoder);
  c.pipeline.expand_timesteps = facts.pipeline.expand_timesteps;
  c.pipeline.boundary_ratio = facts.pipeline.boundary_ratio;
  return c;
}

ModelConfigs tiny_configs() { return configs_of(models::embedded_model()); }

void fill_synthetic(torch::nn::Module& m, uint64_t seed, const std::string& prefix) {
  at::NoGradGuard no_grad;
  for (auto& p : m.named_parameters(true)) {
    const std::string name = prefix + p.key();
    at::Tensor t = p.value();
    const uint64_t s = fnv1a(name) ^ (seed * 0x9e3779b97f4a7c15ull);
    auto gen = at::globalContext().defaultGenerator(t.device());
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_current_seed(s);
    }
    // Drawn in float32 whatever the parameter's dtype, so a bf16, fp32 or fp64 copy of the model
    // holds the same weights (up to rounding): precision controls compare like with like.
    at::Tensor v = at::empty(t.sizes(), t.options().dtype(at::kFloat));
    const bool is_norm = contains(name, "norm") || contains(name, "gamma");
    if (contains(name, "scale_shift_table")) {
      v.normal_(0.0, 0.05, gen);
    } else if (contains(name, "shared.") || contains(name, "embed_tokens")) {
      v.normal_(0.0, 1.0, gen);
    } else if (contains(name, "relative_attention_bias")) {
      v.normal_(0.0, 0.5, gen);
    } else if (is_norm) {
      v.normal_(0.0, 0.05, gen).add_(name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0 ? 0.0 : 1.0);
    } else if (t.dim() >= 2) {
      const double fan_in = static_cast<double>(t.numel() / t.size(0));
      v.normal_(0.0, 1.0 / std::sqrt(fan_in), gen);
    } else {
      v.normal_(0.0, 0.02, gen);
    }
    t.copy_(v);
  }
}

void condition_tiny_transformer(WanTransformer3DModel& m) {
  // Random weights make a chaotic denoiser: a 1e-7 change grows into a different clip over 50 steps,
  // which no caching or sparsity could survive and which a trained model does not do. The tiny model
  // instead predicts a velocity close to its (normalised) input through a near-identity path from the
  // patch embedding to the head, plus small block contributions (gates, time modulation and
  // cross-attention scaled down) that carry the prompt: smooth, deterministic dynamics in which
  // technique errors stay proportionate, like a trained model's.
  at::NoGradGuard g;
  const auto& c = m->config();
  const int64_t C = c.in_channels, P = c.patch_size[0] * c.patch_size[1] * c.patch_size[2];
  if (c.out_channels != C || C * P > c.dim()) return;
  at::Tensor pe = m->patch_embedding->weight;  // [D, C, pt, ph, pw]
  pe.zero_();
  m->patch_embedding->bias.zero_();
  at::Tensor po = m->proj_out->weight;  // [P*C, D], feature ((it*ph + ih)*pw + iw)*C + c
  po.zero_();
  m->proj_out->bias.zero_();
  for (int64_t it = 0; it < c.patch_size[0]; ++it)
    for (int64_t ih = 0; ih < c.patch_size[1]; ++ih)
      for (int64_t iw = 0; iw < c.patch_size[2]; ++iw)
        for (int64_t ch = 0; ch < C; ++ch) {
          const int64_t f = ((it * c.patch_size[1] + ih) * c.patch_size[2] + iw) * C + ch;
          pe[f][ch][it][ih][iw] = 1.0;
          po[f][f] = 1.0;
        }
  m->scale_shift_table.zero_();
  m->time_linear_2->weight.mul_(0.05);
  m->time_linear_2->bias.zero_();
  m->time_proj->weight.mul_(0.05);
  m->time_proj->bias.zero_();
  for (auto& b : m->block_list) {
    b->scale_shift_table.mul_(0.4);               // N(0, 0.02) from fill_synthetic's 0.05
    b->scale_shift_table.select(1, 2).add_(0.1);  // self-attention gate
    b->scale_shift_table.select(1, 5).add_(0.1);  // FFN gate
    b->attn2->to_out0->weight.mul_(0.2);
  }
}

namespace {

// The original Wan2.2 release (Wan-AI/Wan2.2-TI2V-5B) is a different layout: one folder with
// Wan2.2_VAE.pth, models_t5_umt5-xxl-enc-bf16.pth and diffusion_pytorch_model-*.safetensors. Say so,
// and where the diffusers layout comes from, rather than only listing missing files.
std::string original_layout_hint(const fs::path& dir) {
  std::error_code ec;
  bool original = fs::exists(dir / "Wan2.2_VAE.pth", ec) || fs::exists(dir / "models_t5_umt5-xxl-enc-bf16.pth", ec);
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("diffusion_pytorch_model", 0) == 0) original = true;
  if (!original) return "";
  return "\nthis looks like the original (non-diffusers) Wan2.2 release (Wan2.2_VAE.pth, models_t5_*.pth, top-level "
         "diffusion_pytorch_model-*.safetensors); autooptim reads the diffusers layout: download "
         "Wan-AI/Wan2.2-TI2V-5B-Diffusers, "
         "e.g. huggingface-cli download Wan-AI/Wan2.2-TI2V-5B-Diffusers --local-dir Wan2.2-TI2V-5B-Diffusers, and pass "
         "that folder";
}

}  // namespace

namespace {

// model_index.json's pipeline keys: transformer_2 (a component, or null / [null, null]), boundary_ratio
// (required with it, in [0, 1]) and expand_timesteps (a bool; true where absent).
PipelineSpec read_pipeline_spec(const nlohmann::json& index, const std::string& path) {
  auto is_null_component = [](const nlohmann::json& j) {
    return j.is_null() || (j.is_array() && !j.empty() && j[0].is_null());
  };
  PipelineSpec spec;
  const bool two = index.contains("transformer_2") && !is_null_component(index["transformer_2"]);
  const nlohmann::json ratio = index.value("boundary_ratio", nlohmann::json());
  if (two != !ratio.is_null())
    throw CheckpointError(path + ": transformer_2 and boundary_ratio go together (one is set, the other not)");
  if (two) {
    if (!ratio.is_number() || !(ratio.get<double>() >= 0.0 && ratio.get<double>() <= 1.0))
      throw CheckpointError(path + ": boundary_ratio must be a number in [0, 1], got " + ratio.dump());
    spec.boundary_ratio = ratio.get<double>();
  }
  const nlohmann::json expand = index.value("expand_timesteps", nlohmann::json(true));
  if (!expand.is_boolean()) throw CheckpointError(path + ": expand_timesteps must be true or false");
  spec.expand_timesteps = expand.get<bool>();
  return spec;
}

}  // namespace

ModelConfigs read_checkpoint_configs(const std::string& dir_in) {
  const fs::path dir(dir_in);
  if (!fs::is_directory(dir)) throw CheckpointError(dir_in + ": checkpoint folder does not exist");
  std::vector<std::string> missing;
  for (const char* f : {"model_index.json", "transformer/config.json", "vae/config.json", "text_encoder/config.json",
                        "tokenizer/spiece.model", "scheduler/scheduler_config.json"})
    if (!fs::exists(dir / f)) missing.push_back(f);
  if (!missing.empty()) {
    std::ostringstream o;
    o << dir_in << ": not a Wan2.2 diffusers checkpoint folder; missing:";
    for (const auto& m : missing) o << " " << m;
    o << original_layout_hint(dir);
    throw CheckpointError(o.str());
  }
  const auto index = read_json_file((dir / "model_index.json").string());
  const std::string cls = index.value("_class_name", "");
  if (cls != "WanPipeline" && cls != "WanImageToVideoPipeline")
    throw CheckpointError((dir / "model_index.json").string() + ": _class_name '" + cls + "' is not a Wan pipeline");
  const PipelineSpec spec = read_pipeline_spec(index, (dir / "model_index.json").string());
  if (spec.boundary_ratio && !fs::exists(dir / "transformer_2/config.json"))
    throw CheckpointError(dir_in + ": model_index.json names transformer_2 but transformer_2/config.json is missing");
  ModelConfigs c;
  auto with_file = [](const fs::path& f, const std::function<void(const nlohmann::json&)>& fn) {
    try {
      fn(read_json_file(f.string()));
    } catch (const CheckpointError&) {
      throw;
    } catch (const Error& e) {
      throw CheckpointError(f.string() + ": " + e.what());
    }
  };
  c.pipeline = spec;
  with_file(dir / "transformer/config.json",
            [&](const nlohmann::json& j) { c.transformer = WanTransformerConfig::from_json(j); });
  if (spec.boundary_ratio)
    with_file(dir / "transformer_2/config.json", [&](const nlohmann::json& j) {
      if (WanTransformerConfig::from_json(j).to_json() != c.transformer.to_json())
        throw CheckpointError((dir / "transformer_2/config.json").string() +
                              ": the second expert's architecture differs from transformer/config.json's");
    });
  with_file(dir / "vae/config.json", [&](const nlohmann::json& j) { c.vae = WanVAEConfig::from_json(j); });
  with_file(dir / "text_encoder/config.json",
            [&](const nlohmann::json& j) { c.text_encoder = UMT5Config::from_json(j); });
  with_file(dir / "scheduler/scheduler_config.json",
            [&](const nlohmann::json& j) { c.scheduler = UniPCConfig::from_json(j); });
  // The latents, or (A14B image-to-video) the latents, a mask channel per frame of a latent frame and the
  // image's latents.
  const int64_t z = c.vae.z_dim, with_image = 2 * z + c.vae.scale_factor_temporal;
  if (c.transformer.in_channels != z && !(!spec.expand_timesteps && c.transformer.in_channels == with_image))
    throw CheckpointError(dir_in + ": transformer in_channels " + std::to_string(c.transformer.in_channels) +
                          " is neither vae z_dim " + std::to_string(z) +
                          (spec.expand_timesteps ? "" : " nor the image-conditioned " + std::to_string(with_image)));
  if (c.transformer.text_dim != c.text_encoder.d_model)
    throw CheckpointError(dir_in + ": transformer text_dim " + std::to_string(c.transformer.text_dim) +
                          " != text encoder d_model " + std::to_string(c.text_encoder.d_model));
  return c;
}

namespace {

// Every load, by any process, is one line in AUTOOPTIM_LOAD_LOG when set: how a test (or a user) proves
// that a run loads the model once per worker and nowhere else.
void log_load(const std::string& model) {
  const char* log = std::getenv("AUTOOPTIM_LOAD_LOG");
  if (!log || !*log) return;
  const int fd = ::open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string line = std::to_string(::getpid()) + " " + model + "\n";
  ssize_t n = ::write(fd, line.data(), line.size());
  (void)n;
  ::close(fd);
}

std::shared_ptr<Tokenizer> checkpoint_tokenizer(const std::string& dir) {
  return std::make_shared<Tokenizer>(Tokenizer::load((fs::path(dir) / "tokenizer/spiece.model").string()));
}

std::shared_ptr<Tokenizer> embedded_tokenizer() {
  return std::make_shared<Tokenizer>(Tokenizer::from_serialized(tiny_tokenizer_model()));
}

// What a load builds before any weight is made or read: the configs, the tokenizer, whether the weights
// are synthetic, and where they come from.
struct LoadPlan {
  ModelConfigs configs;
  std::shared_ptr<Tokenizer> tokenizer;
  bool synthetic = false;
  std::string weights_label;
};

// A trained embedded model (autooptim train, or the shipped trained weights): a diffusers checkpoint
// folder with the embedded architecture.
LoadPlan plan_trained_embedded(const models::ModelFacts& facts, const LoadRequest& req) {
  if (req.synthetic_weights) throw Error(facts.name + ": --weights and --synthetic-weights exclude each other");
  LoadPlan plan;
  plan.configs = read_checkpoint_configs(req.weights_dir);
  const ModelConfigs want = configs_of(facts);
  auto arch = [](nlohmann::json j) {
    j.erase("latents_mean");  // data, not architecture: set from the training data
    j.erase("latents_std");
    // The VAE's widths may differ (a trained checkpoint may carry a wider encoder/decoder: the latent
    // the transformer sees, z_dim at 16x/4x compression, is what must match).
    j.erase("base_dim");
    j.erase("decoder_base_dim");
    return j;
  };
  const ModelConfigs& c = plan.configs;
  if (c.transformer.to_json() != want.transformer.to_json() || arch(c.vae.to_json()) != arch(want.vae.to_json()) ||
      c.text_encoder.to_json() != want.text_encoder.to_json())
    throw CheckpointError(req.weights_dir + ": not a " + facts.name + " checkpoint (its transformer/vae/text_encoder " +
                          "config.json differ from the tiny architecture; a full-size checkpoint goes with --model " +
                          "wan22-ti2v-5b)");
  plan.tokenizer = checkpoint_tokenizer(req.weights_dir);
  plan.weights_label = "trained (" + req.weights_dir + ")";
  return plan;
}

// A checkpoint of another kind than the model named (one expert or two, image-conditioned or not) is an
// error naming the model it looks like, not a load that fails deep inside.
void check_checkpoint_kind(const models::ModelFacts& facts, const ModelConfigs& c, const std::string& dir) {
  const bool two = c.pipeline.boundary_ratio.has_value();
  const bool image = c.transformer.in_channels != c.vae.z_dim;
  const bool want_two = facts.pipeline.boundary_ratio.has_value();
  if (two == want_two && image == facts.pipeline.needs_image) return;
  // The model of the table whose checkpoints look like this one (read from a checkpoint, not embedded).
  std::string looks;
  for (const auto& m : models::model_table())
    if (looks.empty() && m.tokenizer == models::TokenizerSource::kCheckpoint &&
        m.pipeline.boundary_ratio.has_value() == two && m.pipeline.needs_image == image)
      looks = " (--model " + m.name + "?)";
  throw CheckpointError(dir + ": a " + std::string(two ? "two-expert" : "one-transformer") +
                        (image ? " image-to-video" : "") + " checkpoint, not " + facts.name + "'s" + looks);
}

LoadPlan plan_load(const models::ModelFacts& facts, const LoadRequest& req) {
  LoadPlan plan;
  if (facts.embedded) {
    if (!req.weights_dir.empty()) return plan_trained_embedded(facts, req);
    plan.configs = configs_of(facts);
    plan.tokenizer = embedded_tokenizer();
    plan.synthetic = true;
    plan.weights_label = "synthetic (embedded tiny model)";
    return plan;
  }
  if (req.synthetic_weights == !req.weights_dir.empty())
    throw Error(facts.name + " needs exactly one of --weights DIR (the diffusers checkpoint) or --synthetic-weights");
  if (req.synthetic_weights) {
    plan.configs = configs_of(facts);
    plan.tokenizer = embedded_tokenizer();  // random weights: any vocabulary of the right size will do
    plan.synthetic = true;
    plan.weights_label = "synthetic (full-size shapes, random values)";
  } else {
    plan.configs = read_checkpoint_configs(req.weights_dir);
    check_checkpoint_kind(facts, plan.configs, req.weights_dir);
    plan.tokenizer = checkpoint_tokenizer(req.weights_dir);
    plan.weights_label = req.weights_dir;
  }
  return plan;
}

}  // namespace

LoadedModel load_model(const LoadRequest& req) {
  log_load(req.model);
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel out;
  out.name = req.model;
  const Precision& p = req.precision;
  // The VAE and the text encoder run in float32 as the reference's VAE does; the text encoder in
  // the compute dtype on GPUs (its checkpoint is bf16).
  Precision vae_p{at::kFloat, p.device};
  Precision text_p{p.device.is_cuda() ? at::kBFloat16 : at::kFloat, p.device};
  const models::ModelFacts& facts = models::model_facts(req.model);
  LoadPlan plan = plan_load(facts, req);
  out.weights_label = plan.weights_label;
  const ModelConfigs& c = plan.configs;
  WanTransformer3DModel transformer(c.transformer, p);
  WanTransformer3DModel transformer_2{nullptr};
  if (c.pipeline.boundary_ratio) transformer_2 = WanTransformer3DModel(c.transformer, p);
  AutoencoderKLWan vae(c.vae, vae_p);
  auto text = std::make_shared<UMT5EncoderModel>(c.text_encoder, text_p);
  if (plan.synthetic) {
    for (auto [expert, prefix] : {std::pair{&transformer, "transformer."}, {&transformer_2, "transformer_2."}}) {
      if (!*expert) continue;  // one expert
      fill_synthetic(**expert, 1, prefix);
      if (facts.smooth_synthetic) condition_tiny_transformer(*expert);
    }
    fill_synthetic(*vae, 1, "vae.");
    fill_synthetic(**text, 1, "text_encoder.");
  } else {
    const fs::path d(req.weights_dir);
    load_strict(*transformer, TensorSource::open((d / "transformer").string()));
    if (transformer_2) load_strict(*transformer_2, TensorSource::open((d / "transformer_2").string()));
    load_strict(*vae, TensorSource::open((d / "vae").string()));
    load_umt5(*text, TensorSource::open((d / "text_encoder").string()));
  }
  out.pipeline = std::make_unique<WanPipeline>(transformer, vae, text, plan.tokenizer, c.scheduler, p, req.options);
  out.pipeline->set_spec(c.pipeline, transformer_2);
  device_synchronize(p.device);
  out.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace autooptim::runtime
