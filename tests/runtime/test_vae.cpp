// AutoencoderKLWan (Wan2.2) against the reference's golden vectors (float32, CPU, 1e-5 relative L2),
// plus properties that must hold for any config: key set = checkpoint keys, full-size parameter count,
// streaming decode = decode, a broken weight is caught, bad configs and shapes are errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint.h"
#include "base/error.h"
#include "runtime/techniques/engagement.h"
#include "runtime/techniques/vae/vae_ops.h"
#include "runtime/verify.h"
#include "runtime/wan_vae.h"
#include "cpu_bf16.h"
#include "test_util.h"
#include "runtime/techniques/vae/vae_causal_buffer_options.h"
#include "runtime/techniques/vae/vae_causal_ring_options.h"
#include "runtime/techniques/vae/vae_channels_last_options.h"
#include "runtime/techniques/vae/vae_chunk_frames_options.h"
#include "runtime/techniques/vae/vae_cuda_graph_options.h"
#include "runtime/techniques/vae/vae_frame_convs_options.h"
#include "runtime/techniques/vae/vae_fused_norm_silu_options.h"
#include "runtime/techniques/vae/vae_head_pad_options.h"
#include "runtime/techniques/vae/vae_pointwise_gemm_options.h"
#include "runtime/techniques/vae/vae_subpixel_upsample_options.h"
#include "runtime/techniques/vae/vae_transposed_upsample_options.h"

using namespace autooptim;
using namespace autooptim::runtime;

namespace {

nlohmann::json golden_config_json() { return read_json_file(test::golden_dir() + "/vae_tiny_weights.json")["config"]; }

AutoencoderKLWan load_golden_vae(const Precision& p = {}) {
  AutoencoderKLWan m(WanVAEConfig::from_json(golden_config_json()), p);
  load_strict(*m, TensorSource::open(test::golden_dir() + "/vae_tiny_weights.safetensors"));
  return m;
}

TensorSource golden_io() { return TensorSource::open(test::golden_dir() + "/vae_tiny_io.safetensors"); }

void fill_random(torch::nn::Module& m, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  at::NoGradGuard g;
  for (auto& p : m.parameters()) p.normal_(0.0, 0.1, gen);
}

}  // namespace

TEST(VAE, ParameterNamesAreTheCheckpointKeys) {
  AutoencoderKLWan m(WanVAEConfig::from_json(golden_config_json()));
  const auto src = TensorSource::open(test::golden_dir() + "/vae_tiny_weights.safetensors");
  std::vector<std::string> ours;
  for (const auto& kv : parameter_shapes(*m)) ours.push_back(kv.first);
  EXPECT_EQ(ours, src.names());
  for (const auto& kv : parameter_shapes(*m)) EXPECT_EQ(kv.second, src.shape(kv.first)) << kv.first;
}

TEST(VAE, FullSizeConfigHasTheCheckpointParameterCount) {
  // 704,688,668 parameters in 196 tensors (encoder 149.6 M, decoder 555.1 M); empty bf16 tensors, not run.
  AutoencoderKLWan m(WanVAEConfig::ti2v_5b(), Precision{at::kBFloat16, at::kCPU});
  int64_t n = 0, enc = 0, dec = 0;
  size_t tensors = 0;
  for (const auto& p : m->named_parameters()) {
    n += p.value().numel();
    ++tensors;
    // The spec's split counts quant_conv with the encoder and post_quant_conv with the decoder.
    const bool is_enc = p.key().rfind("encoder.", 0) == 0 || p.key().rfind("quant_conv.", 0) == 0;
    (is_enc ? enc : dec) += p.value().numel();
    EXPECT_EQ(p.value().scalar_type(), at::kBFloat16) << p.key();
  }
  EXPECT_EQ(n, 704688668LL);
  EXPECT_EQ(tensors, 196u);
  EXPECT_NEAR(enc / 1e6, 149.6, 0.05);
  EXPECT_NEAR(dec / 1e6, 555.1, 0.05);
  std::cout << "  parameters " << n << " in " << tensors << " tensors; encoder+quant_conv " << enc
            << ", decoder+post_quant_conv " << dec << "\n";
  const auto shapes = parameter_shapes(*m);
  EXPECT_EQ(shapes.at("decoder.conv_in.weight"), (std::vector<int64_t>{1024, 48, 3, 3, 3}));
  EXPECT_EQ(shapes.at("decoder.mid_block.attentions.0.to_qkv.weight"), (std::vector<int64_t>{3072, 1024, 1, 1}));
  EXPECT_EQ(shapes.at("decoder.up_blocks.0.upsampler.time_conv.weight"), (std::vector<int64_t>{2048, 1024, 3, 1, 1}));
  EXPECT_EQ(shapes.at("decoder.norm_out.gamma"), (std::vector<int64_t>{256, 1, 1, 1}));
  EXPECT_EQ(shapes.at("decoder.conv_out.weight"), (std::vector<int64_t>{12, 256, 3, 3, 3}));
  EXPECT_EQ(shapes.at("encoder.conv_in.weight"), (std::vector<int64_t>{160, 12, 3, 3, 3}));
  EXPECT_EQ(shapes.at("encoder.conv_out.weight"), (std::vector<int64_t>{96, 640, 3, 3, 3}));
  EXPECT_EQ(shapes.at("quant_conv.weight"), (std::vector<int64_t>{96, 96, 1, 1, 1}));
  EXPECT_EQ(shapes.at("post_quant_conv.weight"), (std::vector<int64_t>{48, 48, 1, 1, 1}));
  EXPECT_TRUE(shapes.count("encoder.down_blocks.2.downsampler.time_conv.weight"));
  EXPECT_FALSE(shapes.count("encoder.down_blocks.0.downsampler.time_conv.weight"));
  EXPECT_FALSE(shapes.count("decoder.up_blocks.2.upsampler.time_conv.weight"));
  EXPECT_EQ(m->config().latents_mean.size(), 48u);
  EXPECT_DOUBLE_EQ(m->config().latents_mean[0], -0.2289);
  EXPECT_DOUBLE_EQ(m->config().latents_std[47], 0.7744);
  // The defaults are the TI2V-5B config, and to_json round-trips.
  const auto c = WanVAEConfig::from_json(WanVAEConfig::ti2v_5b().to_json());
  EXPECT_EQ(c.to_json(), WanVAEConfig::ti2v_5b().to_json());
  EXPECT_EQ(WanVAEConfig::from_json(nlohmann::json::object()).to_json(), WanVAEConfig::ti2v_5b().to_json());
}

TEST(VAE, GoldenDecodeAndEveryIntermediate) {
  auto m = load_golden_vae();
  const auto io = golden_io();
  Intermediates inter;
  at::InferenceMode guard;
  const at::Tensor out = m->decode(io.tensor("z"), &inter);
  const double e = rel_l2(out, io.tensor("decoded"));
  EXPECT_LE(e, 1e-5);
  size_t checked = 0;
  for (const auto& name : io.names()) {
    if (name.rfind("inter.", 0) != 0) continue;
    ASSERT_TRUE(inter.count(name.substr(6))) << name;
    const double ei = rel_l2(inter.at(name.substr(6)), io.tensor(name));
    EXPECT_LE(ei, 1e-5) << name;
    std::cout << "  " << name << " rel_l2 " << ei << "\n";
    ++checked;
  }
  std::cout << "  decoded rel_l2 " << e << "\n";
  EXPECT_EQ(checked, 9u);
}

TEST(VAE, GoldenEncodeVideoAndImage) {
  auto m = load_golden_vae();
  const auto io = golden_io();
  at::InferenceMode guard;
  const auto [mean, logvar] = m->encode(io.tensor("video"));
  const double em = rel_l2(mean, io.tensor("encoded_mean")), el = rel_l2(logvar, io.tensor("encoded_logvar"));
  EXPECT_LE(em, 1e-5);
  EXPECT_LE(el, 1e-5);
  const at::Tensor image_mean = m->encode(io.tensor("video").narrow(2, 0, 1)).first;
  const double ei = rel_l2(image_mean, io.tensor("image_encoded_mean"));
  EXPECT_LE(ei, 1e-5);
  std::cout << "  encoded_mean " << em << " encoded_logvar " << el << " image_encoded_mean " << ei << "\n";
  // Causality: the first latent frame of the video equals the image's latent.
  EXPECT_LE(rel_l2(mean.narrow(2, 0, 1), image_mean), 1e-5);
}

TEST(VAE, StreamingDecodeEqualsDecode) {
  auto m = load_golden_vae();
  const auto io = golden_io();
  at::InferenceMode guard;
  const at::Tensor full = m->decode(io.tensor("z"));
  std::vector<at::Tensor> chunks;
  m->decode_streaming(io.tensor("z"), [&](const at::Tensor& t) { chunks.push_back(t); });
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].size(2), 1);
  EXPECT_EQ(chunks[1].size(2), 4);
  EXPECT_EQ(chunks[2].size(2), 4);
  EXPECT_TRUE(at::equal(at::cat(chunks, 2), full));
  EXPECT_LE(full.abs().max().item<double>(), 1.0);  // clamped
}

TEST(VAE, NormalizeDenormalizeRoundTrip) {
  auto m = load_golden_vae();
  const at::Tensor mu = at::randn({2, 8, 3, 4, 6});
  const at::Tensor z = m->normalize(mu);
  // Channel 0: mean -0.35, std 0.5.
  EXPECT_NEAR(z[0][0][0][0][0].item<double>(), (mu[0][0][0][0][0].item<double>() + 0.35) / 0.5, 1e-5);
  EXPECT_LE(rel_l2(m->denormalize(z), mu), 1e-6);
}

TEST(VAE, BrokenWeightIsCaught) {
  auto m = load_golden_vae();
  {
    at::NoGradGuard g;
    m->decoder->up_blocks[1]->resnets[2]->norm2->gamma.fill_(1.0);
    m->encoder->down_blocks[2]->downsampler->time_conv->bias.zero_();
  }
  const auto io = golden_io();
  at::InferenceMode guard;
  EXPECT_GT(rel_l2(m->decode(io.tensor("z")), io.tensor("decoded")), 1e-4);
  EXPECT_GT(rel_l2(m->encode(io.tensor("video")).first, io.tensor("encoded_mean")), 1e-4);
  // The time_conv only runs from the second frame chunk on: the image path is untouched.
  EXPECT_LE(rel_l2(m->encode(io.tensor("video").narrow(2, 0, 1)).first, io.tensor("image_encoded_mean")), 1e-5);
}

TEST(VAE, Bf16Runs) {
  // The pipeline runs the VAE in float32 (spec); bf16 must run and stay close. With the golden's random
  // weights bf16 rounding through ~40 convolutions drifts about 2.4% on decode, 1.8% on encode, where the
  // convolutions accumulate in float32; on a CPU where libtorch accumulates them in bf16 (cpu_bf16.h),
  // 9.1% and 7.1%.
  const double bound = test::cpu_bf16_conv_accumulates_in_bf16() ? 0.15 : 5e-2;
  auto m = load_golden_vae(Precision{at::kBFloat16, at::kCPU});
  const auto io = golden_io();
  at::InferenceMode guard;
  const at::Tensor out = m->decode(io.tensor("z"));
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  const double ed = rel_l2(out, io.tensor("decoded"));
  EXPECT_LE(ed, bound);
  const at::Tensor mean = m->encode(io.tensor("video").narrow(2, 0, 5)).first;
  const double ee = rel_l2(mean, io.tensor("encoded_mean").narrow(2, 0, 2));
  EXPECT_LE(ee, bound);
  std::cout << "  bf16 decoded " << ed << " encoded_mean (5 frames) " << ee << "\n";
}

TEST(VAE, OtherConfigShapes) {
  // 3 stages with temporal downsampling only in the first, patch 1, batch 2: shapes follow the config.
  nlohmann::json j = {{"base_dim", 4},
                      {"decoder_base_dim", 6},
                      {"z_dim", 4},
                      {"dim_mult", {1, 2, 2}},
                      {"num_res_blocks", 1},
                      {"temperal_downsample", {true, false}},
                      {"in_channels", 3},
                      {"out_channels", 3},
                      {"patch_size", nullptr},
                      {"scale_factor_spatial", 4},
                      {"scale_factor_temporal", 2},
                      {"latents_mean", {0, 0, 0, 0}},
                      {"latents_std", {1, 1, 1, 1}}};
  AutoencoderKLWan m(WanVAEConfig::from_json(j));
  fill_random(*m, 5);
  at::InferenceMode guard;
  const at::Tensor video = at::rand({2, 3, 5, 8, 12}) * 2 - 1;
  const auto [mean, logvar] = m->encode(video);
  EXPECT_EQ(mean.sizes(), (std::vector<int64_t>{2, 4, 3, 2, 3}));
  const at::Tensor out = m->decode(mean);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, 5, 8, 12}));
  // Batch rows are independent.
  EXPECT_LE(rel_l2(m->decode(mean.narrow(0, 1, 1)), out.narrow(0, 1, 1)), 1e-5);
}

TEST(VAE, Wan21StructureHasTheCheckpointsNamesAndShapes) {
  // The A14B checkpoints' vae/ (diffusers AutoencoderKLWan with is_residual false): flat down_blocks of
  // residual blocks and downsamplers, up blocks with 3 resnets and "upsamplers.0" halving the channels.
  const WanVAEConfig c = WanVAEConfig::wan21();
  EXPECT_EQ(WanVAEConfig::from_json(c.to_json()).to_json(), c.to_json());
  WanVAEConfig small = c;
  small.base_dim = small.decoder_base_dim = 8;
  const auto shapes = parameter_shapes(*AutoencoderKLWan(small));
  auto shape = [&](const std::string& n) {
    const auto it = shapes.find(n);
    return it == shapes.end() ? std::vector<int64_t>{} : it->second;
  };
  EXPECT_EQ(shape("encoder.conv_in.weight"), (std::vector<int64_t>{8, 3, 3, 3, 3}));
  EXPECT_EQ(shape("encoder.down_blocks.1.conv2.weight"), (std::vector<int64_t>{8, 8, 3, 3, 3}));
  EXPECT_EQ(shape("encoder.down_blocks.2.resample.1.weight"), (std::vector<int64_t>{8, 8, 3, 3}));
  EXPECT_EQ(shape("encoder.down_blocks.3.conv_shortcut.weight"), (std::vector<int64_t>{16, 8, 1, 1, 1}));
  EXPECT_EQ(shape("encoder.down_blocks.5.time_conv.weight"), (std::vector<int64_t>{16, 16, 3, 1, 1}));
  EXPECT_EQ(shape("encoder.down_blocks.10.conv1.weight"), (std::vector<int64_t>{32, 32, 3, 3, 3}));
  EXPECT_TRUE(shape("encoder.down_blocks.11.conv1.weight").empty());  // 4 stages: 2+1, 2+1, 2+1, 2
  EXPECT_EQ(shape("encoder.conv_out.weight"), (std::vector<int64_t>{32, 32, 3, 3, 3}));
  EXPECT_EQ(shape("decoder.up_blocks.0.resnets.2.conv2.weight"), (std::vector<int64_t>{32, 32, 3, 3, 3}));
  EXPECT_EQ(shape("decoder.up_blocks.0.upsamplers.0.resample.1.weight"), (std::vector<int64_t>{16, 32, 3, 3}));
  EXPECT_EQ(shape("decoder.up_blocks.0.upsamplers.0.time_conv.weight"), (std::vector<int64_t>{64, 32, 3, 1, 1}));
  EXPECT_EQ(shape("decoder.up_blocks.1.resnets.0.conv1.weight"), (std::vector<int64_t>{32, 16, 3, 3, 3}));
  EXPECT_EQ(shape("decoder.up_blocks.2.upsamplers.0.resample.1.weight"), (std::vector<int64_t>{8, 16, 3, 3}));
  EXPECT_TRUE(shape("decoder.up_blocks.2.upsamplers.0.time_conv.weight").empty());  // upsample2d
  EXPECT_EQ(shape("decoder.up_blocks.1.resnets.0.conv_shortcut.weight"), (std::vector<int64_t>{32, 16, 1, 1, 1}));
  EXPECT_EQ(shape("decoder.up_blocks.3.resnets.0.conv1.weight"), (std::vector<int64_t>{8, 8, 3, 3, 3}));
  EXPECT_TRUE(shape("decoder.up_blocks.3.resnets.0.conv_shortcut.weight").empty());
  EXPECT_TRUE(shape("decoder.up_blocks.3.upsamplers.0.resample.1.weight").empty());
  EXPECT_EQ(shape("decoder.conv_out.weight"), (std::vector<int64_t>{3, 8, 3, 3, 3}));

  // 8x spatial and 4x temporal, no patchify: 9 frames of 16x24 <-> 3 latent frames of 2x3.
  AutoencoderKLWan m(small);
  fill_random(*m, 7);
  at::InferenceMode guard;
  const auto [mean, logvar] = m->encode(at::rand({1, 3, 9, 16, 24}) * 2 - 1);
  EXPECT_EQ(mean.sizes(), (std::vector<int64_t>{1, 16, 3, 2, 3}));
  EXPECT_EQ(m->decode(mean).sizes(), (std::vector<int64_t>{1, 3, 9, 16, 24}));
}

TEST(VAE, BadConfigsAndShapesAreErrors) {
  EXPECT_THROW(WanVAEConfig::from_json({{"attn_scales", {0.5}}}), Error);
  EXPECT_THROW(WanVAEConfig::from_json({{"z_dim", "many"}}), Error);
  EXPECT_THROW(WanVAEConfig::from_json({{"z_dim", 16}}), Error);  // 48 latents_mean values
  EXPECT_THROW(WanVAEConfig::from_json({{"temperal_downsample", {true, true}}}), Error);
  EXPECT_THROW(WanVAEConfig::from_json({{"scale_factor_spatial", 8}}), Error);
  EXPECT_THROW(WanVAEConfig::from_json({{"in_channels", 10}}), Error);
  EXPECT_THROW(WanVAEConfig::from_json(nlohmann::json::array()), Error);
  try {
    WanVAEConfig::from_json({{"num_res_blocks", "two"}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_res_blocks"), std::string::npos);
  }
  auto m = load_golden_vae();
  at::InferenceMode guard;
  EXPECT_THROW(m->decode(at::randn({1, 7, 2, 4, 6})), Error);    // channels
  EXPECT_THROW(m->decode(at::randn({8, 2, 4, 6})), Error);       // rank
  EXPECT_THROW(m->encode(at::randn({1, 3, 4, 64, 96})), Error);  // 4 frames, not 1 + 4k
  EXPECT_THROW(m->encode(at::randn({1, 3, 5, 40, 96})), Error);  // height not a multiple of 16
  EXPECT_THROW(m->encode(at::randn({1, 4, 5, 64, 96})), Error);  // channels
  EXPECT_THROW(m->normalize(at::randn({1, 9, 1, 2, 2})), Error);
}

TEST(VAE, VerifyListsTheVaeRows) {
  test::TempDir tmp;
  for (const char* f :
       {"vae_tiny_weights.json", "vae_tiny_weights.safetensors", "vae_tiny_io.json", "vae_tiny_io.safetensors"})
    std::filesystem::copy_file(test::golden_dir() + "/" + f, tmp.file(f));
  const auto rep = verify_golden_dir(tmp.path().string(), VerifyOptions{});
  EXPECT_EQ(rep.rows.size(), 13u);  // decoded, 9 inter.*, encoded_mean, encoded_logvar, image_encoded_mean
  EXPECT_TRUE(rep.all_pass());
  for (const auto& r : rep.rows) {
    EXPECT_TRUE(r.pass) << r.tensor << " " << r.rel_l2;
    std::cout << "  " << r.component << " " << r.tensor << " " << r.rel_l2 << (r.pass ? " pass" : " FAIL") << "\n";
  }
}

// The decoder's kernel switches (techniques/vae/) on the golden tiny VAE, float32 on the CPU: the causal
// buffer is the same conv on the same values (bit-identical), the sub-pixel upsampler and channels-last
// are the same sums in another order; each counts its engagement. The fused norm + SiLU is a CUDA
// kernel (tests/runtime/test_gpu_kernels.cpp); on the CPU it does not engage and the reference ops run.
namespace {

at::Tensor decode_with(AutoencoderKLWan& m, const at::Tensor& z, const RuntimeOptions& o, Trace* trace) {
  techniques::VaeRun run{&o, trace};
  at::Tensor zz = z;
  return m->decode(zz, nullptr, &run);
}

// A causal 3x3x3 conv (4 -> 6 channels) and the RMS norm before it, float32, random weights from `seed`
// (gains in [0.5, 1.5)).
struct NormConv {
  WanCausalConv3d conv{nullptr};
  WanRMSNorm norm{nullptr};
};
NormConv random_norm_conv(uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  NormConv nc{WanCausalConv3d(int64_t{4}, int64_t{6}, std::vector<int64_t>{3, 3, 3}, std::vector<int64_t>{1, 1, 1},
                              std::vector<int64_t>{1, 1, 1}, opts),
              WanRMSNorm(int64_t{4}, false, opts)};
  for (auto& p : nc.conv->parameters()) p.copy_(at::randn(p.sizes(), gen));
  for (auto& p : nc.norm->parameters()) p.copy_(at::rand(p.sizes(), gen) + 0.5);
  return nc;
}

}  // namespace

TEST(VAE, CausalBufferIsBitIdentical) {
  auto m = load_golden_vae();
  const auto io = golden_io();
  at::InferenceMode guard;
  const at::Tensor ref = m->decode(io.tensor("z"));
  RuntimeOptions o;
  o.of<VaeCausalBufferOptions>().on = true;
  Trace trace;
  const at::Tensor got = decode_with(m, io.tensor("z"), o, &trace);
  EXPECT_TRUE(at::equal(got, ref));
  // Every 3x3x3 conv of the decoder in every chunk: 3 chunks of the golden latents.
  EXPECT_GT(trace.get("kernel.vae_causal_buffer.convs"), 3 * 10);
  // Twice in a row on the same cache-free module: nothing carried over between decodes.
  Trace t2;
  EXPECT_TRUE(at::equal(decode_with(m, io.tensor("z"), o, &t2), ref));
}

// vae_causal_ring: the causal buffers holding 2 or 3 chunks' windows (the context already in place, moved
// to the front once per ring) give the one-window buffer's decode bit for bit, on the golden latents in
// channels-last (where it applies) and on one conv over 1 + 4 x 6 frames of chunks; each window read past
// the front is counted; a batch of two keeps one window (a frame range would not be dense there).
TEST(VAE, CausalRingIsBitIdenticalToTheBuffer) {
  auto m = load_golden_vae();
  const auto io = golden_io();
  at::InferenceMode guard;
  RuntimeOptions buffered;
  buffered.of<VaeCausalBufferOptions>().on = true;
  buffered.of<VaeChannelsLastOptions>().on = true;
  const at::Tensor ref = decode_with(m, io.tensor("z"), buffered, nullptr);
  for (const int64_t ring : {2, 3}) {
    SCOPED_TRACE("vae_causal_ring " + std::to_string(ring));
    RuntimeOptions o = buffered;
    o.of<VaeCausalRingOptions>().chunks = ring;
    Trace trace;
    EXPECT_TRUE(at::equal(decode_with(m, io.tensor("z"), o, &trace), ref));
    EXPECT_GT(trace.get("kernel.vae_causal_ring.windows"), 10);
  }

  const auto [conv, norm] = random_norm_conv(11);
  auto gen = at::detail::createCPUGenerator(12);
  for (const int64_t B : {1, 2}) {
    RuntimeOptions ro = buffered;
    ro.of<VaeCausalRingOptions>().chunks = 3;
    Trace trace;
    const techniques::VaeRun rrun{&ro, &trace}, brun{&buffered, nullptr};
    WanCausalCache rc, bc;
    rc.run = &rrun;
    bc.run = &brun;
    int64_t chunk = 0;
    for (const int64_t T : {1, 4, 4, 4, 4, 4, 4}) {
      const at::Tensor x = at::randn({B, 4, T, 5, 7}, gen).contiguous(at::MemoryFormat::ChannelsLast3d);
      rc.begin_chunk();
      bc.begin_chunk();
      const at::Tensor got = conv->forward_cached_norm_silu(x, *norm, rc);
      EXPECT_TRUE(at::equal(got, conv->forward_cached_norm_silu(x, *norm, bc))) << "batch " << B << ", chunk " << chunk;
      ++chunk;
    }
    ASSERT_EQ(rc.slots.size(), 1u);
    if (B == 1) {
      EXPECT_EQ(rc.slots[0].frames.size(2), 3 * 4 + 2);
      // Chunks 2-7 at positions 0, 4, 8, 0, 4, 8 of the ring: four past the front.
      EXPECT_EQ(trace.get("kernel.vae_causal_ring.windows"), 4);
    } else {
      EXPECT_EQ(rc.slots[0].frames.size(2), 4 + 2);
      EXPECT_EQ(trace.get("kernel.vae_causal_ring.windows"), 0);
    }
  }
}

// vae_cuda_graph on the CPU: nothing to capture, every chunk runs eagerly (counted) and the decode is the
// reference's bit for bit; the engagement check then says the switch did nothing. What a graph needs from
// the eager code holds here too: with the switch on, a chunk copies the context it keeps into the cache
// slot's own tensor, so from the second chunk on no slot's memory moves (a replayed graph reads it there),
// through an up block's residual blocks and its temporal upsampler, batch 1 and 2.
TEST(VAE, CudaGraphSwitchKeepsTheCausalCacheInPlace) {
  auto m = load_golden_vae();
  const auto io = golden_io();
  at::InferenceMode guard;
  const at::Tensor z = io.tensor("z");
  const at::Tensor ref = m->decode(z);
  for (const bool buffered : {false, true}) {
    SCOPED_TRACE(buffered ? "with vae_causal_buffer" : "alone");
    RuntimeOptions o;
    o.of<VaeCudaGraphOptions>().on = true;
    o.of<VaeCausalBufferOptions>().on = buffered;
    Trace trace;
    EXPECT_TRUE(at::equal(decode_with(m, z, o, &trace), ref));
    EXPECT_EQ(trace.get("kernel.vae_cuda_graph.eager_chunks"), z.size(2));
    EXPECT_EQ(trace.get("kernel.vae_cuda_graph.replays"), 0);
    const auto problems = engagement_problems(o, trace);
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_NE(problems[0].find("vae_cuda_graph"), std::string::npos) << problems[0];
  }

  WanUpBlock block(8, 8, 1, true, true, true, at::TensorOptions().dtype(at::kFloat));
  fill_random(*block, 31);
  auto gen = at::detail::createCPUGenerator(32);
  for (const int64_t B : {1, 2}) {
    RuntimeOptions plain_o, graph_o;
    graph_o.of<VaeCudaGraphOptions>().on = true;
    const techniques::VaeRun plain_run{&plain_o, nullptr}, graph_run{&graph_o, nullptr};
    WanCausalCache plain, graphed;
    plain.run = &plain_run;
    graphed.run = &graph_run;
    std::vector<const void*> where;
    for (int chunk = 0; chunk < 4; ++chunk) {
      const at::Tensor x = at::randn({B, 8, chunk == 0 ? 1 : 2, 5, 6}, gen);
      plain.begin_chunk();
      graphed.begin_chunk();
      const at::Tensor want = block->forward(x, plain, chunk == 0);
      EXPECT_TRUE(at::equal(block->forward(x, graphed, chunk == 0), want)) << "batch " << B << ", chunk " << chunk;
      std::vector<const void*> now;
      for (const auto& slot : graphed.slots) now.push_back(slot.frames.defined() ? slot.frames.data_ptr() : nullptr);
      // Four causal convs (two residual blocks': an up block has one more than num_res_blocks) and the
      // temporal upsampler's cache.
      ASSERT_EQ(now.size(), 5u);
      if (chunk >= 1)  // the first chunk leaves the upsampler's cache empty ("Rep")
        for (const void* p : now) EXPECT_NE(p, nullptr) << "chunk " << chunk;
      if (chunk >= 2) EXPECT_EQ(now, where) << "batch " << B << ", chunk " << chunk << ": a cache tensor moved";
      where = now;
    }
  }
}

TEST(VAE, ChunkFramesComputeWhatOneFrameChunksDo) {
  // Random latents of 6 frames on the golden VAE: chunks of 1 (reference), then 2, 4 (1 + 4 + a remainder
  // of 1) and 16 (everything after the first frame at once), alone and with the causal buffer.
  auto m = load_golden_vae();
  at::InferenceMode guard;
  auto gen = at::detail::createCPUGenerator(4);
  const at::Tensor z = at::randn({1, m->config().z_dim, 6, 4, 4}, gen, at::kFloat);
  const at::Tensor ref = m->decode(z);
  for (int64_t k : {2, 4, 16})
    for (bool buffered : {false, true}) {
      SCOPED_TRACE("vae_chunk_frames " + std::to_string(k) + (buffered ? " + causal buffer" : ""));
      RuntimeOptions o;
      o.of<VaeChunkFramesOptions>().frames = k;
      o.of<VaeCausalBufferOptions>().on = buffered;
      Trace trace;
      const at::Tensor got = decode_with(m, z, o, &trace);
      ASSERT_EQ(got.sizes(), ref.sizes());
      EXPECT_LE(rel_l2(got, ref),
                1e-5);  // float32 sums of other conv shapes (measured 1.3e-6); a lost context is ~1e-1
      // Chunks of more than one latent frame: 5 frames after the first.
      EXPECT_EQ(trace.get("kernel.vae_chunk_frames.chunks"), k == 2 ? 2 : 1);
    }
  // Off (1) is the reference path's chunking exactly.
  RuntimeOptions one;
  Trace t1;
  EXPECT_TRUE(at::equal(decode_with(m, z, one, &t1), ref));
  EXPECT_EQ(t1.get("kernel.vae_chunk_frames.chunks"), 0);
}

namespace {

// The golden decode through the upsampling switch that `o` turns on: within float32 rounding of the
// reference path but not equal to it (the folded taps round differently: an exact match means the
// switch did nothing), and its `counter` counted.
void expect_golden_decode_with_upsampler(const RuntimeOptions& o, const char* counter) {
  auto m = load_golden_vae();
  const auto io = golden_io();
  at::InferenceMode guard;
  const at::Tensor ref = m->decode(io.tensor("z"));
  Trace trace;
  const at::Tensor got = decode_with(m, io.tensor("z"), o, &trace);
  EXPECT_LE(rel_l2(got, ref), 1e-5);
  EXPECT_FALSE(at::equal(got, ref)) << "the folded taps round differently: an exact match means the switch did nothing";
  EXPECT_GT(trace.get(counter), 0);
}

}  // namespace

TEST(VAE, SubpixelUpsampleEqualsNearestThenConv) {
  RuntimeOptions o;
  o.of<VaeSubpixelUpsampleOptions>().on = true;
  expect_golden_decode_with_upsampler(o, "kernel.vae_subpixel_upsample.convs");
}

namespace {

// One upsampler alone (6 channels, a frame stack neither square nor even-sized, batch 2) through the
// upsampling switch that `o` turns on, against nearest 2x + 3x3 conv: the same values, one count (its
// `counter`) per call; channels-last in a channels-last decode gives the same values, channels-last.
void expect_upsampler_switch_matches_reference(RuntimeOptions o, const char* counter) {
  auto make = [] {
    WanResample up(6, WanResampleImpl::Mode::kUpsample2d, at::TensorOptions().dtype(at::kFloat));
    fill_random(*up, 5);
    return up;
  };
  WanResample up = make();
  at::InferenceMode guard;
  auto gen = at::detail::createCPUGenerator(9);
  const at::Tensor x = at::randn({2, 6, 3, 5, 7}, gen, at::kFloat);
  WanCausalCache plain;
  const at::Tensor ref = up->forward(x, plain);
  Trace trace;
  techniques::VaeRun run{&o, &trace};
  WanCausalCache fast;
  fast.run = &run;
  const at::Tensor got = up->forward(x, fast);
  ASSERT_EQ(got.sizes(), ref.sizes());
  EXPECT_LE(rel_l2(got, ref), 1e-6);
  EXPECT_EQ(trace.get(counter), 1);
  RuntimeOptions ocl = o;
  ocl.of<VaeChannelsLastOptions>().on = true;
  techniques::VaeRun run_cl{&ocl, &trace};
  WanCausalCache fast_cl;
  fast_cl.run = &run_cl;
  WanResample up_cl = make();  // its folded weights made for this layout
  const at::Tensor got_cl = up_cl->forward(x.contiguous(at::MemoryFormat::ChannelsLast3d), fast_cl);
  ASSERT_EQ(got_cl.sizes(), ref.sizes());
  EXPECT_LE(rel_l2(got_cl, ref), 1e-6);
  EXPECT_TRUE(got_cl.is_contiguous(at::MemoryFormat::ChannelsLast3d));
  EXPECT_EQ(trace.get(counter), 2);
}

}  // namespace

TEST(VAE, SubpixelUpsampleOnOddFramesAndBatchTwo) {
  RuntimeOptions o;
  o.of<VaeSubpixelUpsampleOptions>().on = true;
  expect_upsampler_switch_matches_reference(o, "kernel.vae_subpixel_upsample.convs");
}

TEST(VAE, ChannelsLastAndEveryCpuSwitchTogether) {
  auto m = load_golden_vae();
  const auto io = golden_io();
  at::InferenceMode guard;
  const at::Tensor ref = m->decode(io.tensor("z"));
  // A channels-last copy of the weights, as WanPipeline::decoding_vae makes it.
  auto cl = load_golden_vae();
  {
    at::NoGradGuard g;
    for (auto& p : cl->parameters())
      if (p.dim() == 5) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast3d));
  }
  RuntimeOptions o;
  o.of<VaeChannelsLastOptions>().on = true;
  o.of<VaeCausalBufferOptions>().on = true;
  o.of<VaeSubpixelUpsampleOptions>().on = true;
  o.of<VaeFusedNormSiluOptions>().on = true;  // no CUDA here: must not engage, and must not change the result
  Trace trace;
  const at::Tensor got = decode_with(cl, io.tensor("z"), o, &trace);
  EXPECT_LE(rel_l2(got, ref), 1e-5);
  EXPECT_GT(trace.get("kernel.vae_causal_buffer.convs"), 0);
  EXPECT_GT(trace.get("kernel.vae_subpixel_upsample.convs"), 0);
  EXPECT_EQ(trace.get("kernel.vae_fused_norm_silu.launches"), 0);
  // Intermediates are the reference path's: asking for them with switches on is refused.
  Intermediates inter;
  techniques::VaeRun run{&o, nullptr};
  EXPECT_THROW(cl->decode(io.tensor("z"), &inter, &run), Error);
}

// vae_frame_convs: a conv whose kernel spans one frame, on a channels_last_3d input, runs as a 2D conv
// over the frames' view: the same values as the 3D conv (1x1, 1x3x3 padded, 1x2x2, strided; odd sizes,
// batch 2), a channels-last result, one count per conv; channels-first inputs and temporal kernels are
// not taken.
TEST(VAE, FrameConvsEqualTheThreeDConv) {
  at::InferenceMode guard;
  auto gen = at::detail::createCPUGenerator(7);
  RuntimeOptions o;
  o.of<VaeFrameConvsOptions>().on = true;
  Trace trace;
  const techniques::VaeRun run{&o, &trace};
  struct Case {
    int64_t ci, co, kh, kw, sh, ph;
  };
  int n = 0;
  for (const Case c :
       {Case{5, 7, 1, 1, 1, 0}, Case{6, 4, 3, 3, 1, 1}, Case{3, 12, 2, 2, 1, 0}, Case{4, 4, 3, 3, 2, 0}}) {
    SCOPED_TRACE("kernel " + std::to_string(c.kh) + "x" + std::to_string(c.kw) + " stride " + std::to_string(c.sh));
    const at::Tensor x = at::randn({2, c.ci, 3, 9, 11}, gen).contiguous(at::MemoryFormat::ChannelsLast3d);
    const at::Tensor w = at::randn({c.co, c.ci, 1, c.kh, c.kw}, gen), b = at::randn({c.co}, gen);
    const std::vector<int64_t> stride{1, c.sh, c.sh}, pad{0, c.ph, c.ph};
    ASSERT_TRUE(techniques::vae_frame_conv_applies(&run, x, w, stride, pad));
    const at::Tensor want = at::conv3d(x.contiguous(), w, b, stride, pad);
    const at::Tensor got = techniques::vae_frame_conv(run, x, w, b, stride, pad);
    ++n;
    EXPECT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(got.is_contiguous(at::MemoryFormat::ChannelsLast3d));
    EXPECT_LE(rel_l2(got, want), 1e-6);
    EXPECT_FALSE(techniques::vae_frame_conv_applies(&run, x.contiguous(), w, stride, pad));  // channels first
  }
  EXPECT_EQ(trace.get("kernel.vae_frame_convs.convs"), n);
  const at::Tensor x = at::randn({1, 4, 3, 5, 5}).contiguous(at::MemoryFormat::ChannelsLast3d);
  EXPECT_FALSE(
      techniques::vae_frame_conv_applies(&run, x, at::randn({4, 4, 3, 1, 1}), {1, 1, 1}, {0, 0, 0}));  // temporal
  RuntimeOptions off;
  const techniques::VaeRun plain{&off, nullptr};
  EXPECT_FALSE(techniques::vae_frame_conv_applies(&plain, x, at::randn({4, 4, 1, 3, 3}), {1, 1, 1}, {0, 1, 1}));
  EXPECT_FALSE(techniques::vae_frame_conv_applies(nullptr, x, at::randn({4, 4, 1, 3, 3}), {1, 1, 1}, {0, 1, 1}));
}

// vae_causal_buffer under vae_channels_last: the conv's [context, chunk] buffer is channels-last (it was
// channels-first whatever the format asked, at::zeros drops it, and cuDNN converted it on every conv),
// over a one-frame chunk then a four-frame one, with the same output as the concatenating path.
TEST(VAE, CausalBufferIsChannelsLastInAChannelsLastDecode) {
  at::InferenceMode guard;
  const auto [conv, norm] = random_norm_conv(3);
  auto gen = at::detail::createCPUGenerator(4);
  RuntimeOptions buffered, plain;
  buffered.of<VaeChannelsLastOptions>().on = plain.of<VaeChannelsLastOptions>().on = true;
  buffered.of<VaeCausalBufferOptions>().on = true;
  const techniques::VaeRun brun{&buffered, nullptr}, prun{&plain, nullptr};
  WanCausalCache bc, pc;
  bc.run = &brun;
  pc.run = &prun;
  for (const int64_t T : {1, 4, 4}) {
    const at::Tensor x = at::randn({1, 4, T, 5, 7}, gen).contiguous(at::MemoryFormat::ChannelsLast3d);
    bc.begin_chunk();
    pc.begin_chunk();
    const at::Tensor got = conv->forward_cached_norm_silu(x, *norm, bc);
    const at::Tensor want = conv->forward_cached_norm_silu(x, *norm, pc);
    ASSERT_EQ(bc.slots.size(), 1u);
    EXPECT_TRUE(bc.slots[0].frames.is_contiguous(at::MemoryFormat::ChannelsLast3d)) << "chunk of " << T;
    EXPECT_EQ(bc.slots[0].frames.size(2), T + 2);
    EXPECT_LE(rel_l2(got, want), 1e-6) << "chunk of " << T;
  }
}

// vae_pointwise_gemm: a residual block's 1x1x1 shortcut (6 -> 4 channels) as one GEMM over the voxels of
// a channels-last input (batch 2, odd frame sizes, one- and three-frame chunks) gives the conv's block
// output, once per forward; the GEMM alone with and without a bias equals at::conv3d and returns
// channels_last_3d; 3x3x3, strided, padded and channels-first convs are left to the conv.
TEST(VAE, PointwiseGemmEqualsTheOneByOneConv) {
  at::InferenceMode guard;
  auto gen = at::detail::createCPUGenerator(5);
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  WanResidualBlock block(int64_t{6}, int64_t{4}, opts);
  for (auto& p : block->parameters()) p.copy_(at::randn(p.sizes(), gen) * 0.5 + (p.dim() == 4 ? 1.0 : 0.0));
  ASSERT_TRUE(block->conv_shortcut);
  RuntimeOptions gemm, plain;
  gemm.of<VaeChannelsLastOptions>().on = plain.of<VaeChannelsLastOptions>().on = true;
  gemm.of<VaePointwiseGemmOptions>().on = true;
  Trace trace;
  const techniques::VaeRun grun{&gemm, &trace}, prun{&plain, nullptr};
  WanCausalCache gc, pc;
  gc.run = &grun;
  pc.run = &prun;
  int64_t forwards = 0;
  for (const int64_t T : {1, 3}) {
    const at::Tensor x = at::randn({2, 6, T, 5, 7}, gen).contiguous(at::MemoryFormat::ChannelsLast3d);
    gc.begin_chunk();
    pc.begin_chunk();
    const at::Tensor got = block->forward(x, gc), want = block->forward(x, pc);
    ++forwards;
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LE(rel_l2(got, want), 1e-6) << "chunk of " << T;
    EXPECT_EQ(trace.get("kernel.vae_pointwise_gemm.convs"), forwards);
  }
  const at::Tensor x = at::randn({2, 6, 3, 5, 7}, gen).contiguous(at::MemoryFormat::ChannelsLast3d);
  const at::Tensor w = at::randn({4, 6, 1, 1, 1}, gen), b = at::randn({4}, gen);
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    const at::Tensor bias = with_bias ? b : at::Tensor();
    ASSERT_TRUE(techniques::vae_pointwise_gemm_applies(&grun, x, w, {1, 1, 1}, {0, 0, 0}));
    const at::Tensor got = techniques::vae_pointwise_gemm(grun, x, w, bias);
    const at::Tensor want = at::conv3d(x, w, bias);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(got.is_contiguous(at::MemoryFormat::ChannelsLast3d));
    EXPECT_LE(rel_l2(got, want), 1e-6);
  }
  EXPECT_FALSE(techniques::vae_pointwise_gemm_applies(&grun, x, at::randn({4, 6, 3, 3, 3}), {1, 1, 1}, {0, 0, 0}));
  EXPECT_FALSE(techniques::vae_pointwise_gemm_applies(&grun, x, w, {1, 2, 2}, {0, 0, 0}));
  EXPECT_FALSE(techniques::vae_pointwise_gemm_applies(&grun, x, w, {1, 1, 1}, {0, 1, 1}));
  EXPECT_FALSE(techniques::vae_pointwise_gemm_applies(&grun, x.contiguous(), w, {1, 1, 1}, {0, 0, 0}));
  EXPECT_FALSE(techniques::vae_pointwise_gemm_applies(&prun, x, w, {1, 1, 1}, {0, 0, 0}));
  EXPECT_FALSE(techniques::vae_pointwise_gemm_applies(nullptr, x, w, {1, 1, 1}, {0, 0, 0}));
}

// vae_transposed_upsample: nearest 2x + 3x3 conv as one stride-2 4x4 transposed conv, on one upsampler
// (odd, non-square frames, batch 2, channels-first and channels-last) and on the golden decode; the 4x4
// taps are the sub-pixel phases' folded taps laid out as conv_transpose reads them.
TEST(VAE, TransposedUpsampleEqualsNearestThenConv) {
  RuntimeOptions o;
  o.of<VaeTransposedUpsampleOptions>().on = true;
  expect_upsampler_switch_matches_reference(o, "kernel.vae_transposed_upsample.convs");
  at::InferenceMode guard;
  // The taps: a one-hot 3x3 kernel at (r, c) lands on the 4x4 positions that read it.
  at::Tensor w = at::zeros({1, 1, 3, 3});
  w[0][0][0][2] = 1.0;                                                       // W0 of the rows, W2 of the columns
  const at::Tensor t = techniques::vae_transposed_upsample_weight(w)[0][0];  // [4, 4]
  // rows: [W2, W1+W2, W0+W1, W0] -> W0 at taps 2 and 3; columns: W2 at taps 0 and 1.
  at::Tensor want = at::zeros({4, 4});
  want.narrow(0, 2, 2).narrow(1, 0, 2).fill_(1.0);
  EXPECT_TRUE(at::equal(t, want)) << t;
  expect_golden_decode_with_upsampler(o, "kernel.vae_transposed_upsample.convs");
}

// vae_head_pad: the decoder's output conv with zero filters added up to 16 or 32 output channels gives
// the same 12 channels, through both causal-conv paths (concatenating, buffered), and counts once per
// chunk; a padding not above the conv's channels is not applied, and only the output conv is padded.
TEST(VAE, HeadPadGivesTheSameChannels) {
  auto m = load_golden_vae();
  const auto io = golden_io();
  at::InferenceMode guard;
  const at::Tensor ref = m->decode(io.tensor("z"));
  const int64_t chunks = io.tensor("z").size(2);
  for (const int64_t pad : {16, 32})
    for (const bool buffered : {false, true}) {
      SCOPED_TRACE("vae_head_pad " + std::to_string(pad) + (buffered ? " + causal buffer" : ""));
      RuntimeOptions o;
      o.of<VaeHeadPadOptions>().channels = pad;
      o.of<VaeCausalBufferOptions>().on = buffered;
      Trace trace;
      const at::Tensor got = decode_with(m, io.tensor("z"), o, &trace);
      ASSERT_EQ(got.sizes(), ref.sizes());
      EXPECT_LE(rel_l2(got, ref), 1e-6);
      EXPECT_EQ(trace.get("kernel.vae_head_pad.convs"), chunks);
      EXPECT_EQ(m->decoder->conv_out->padded_weight.size(0), pad);
    }
  // 8 is not above the golden head's 12 channels: not applied (the engagement check then fails the run).
  RuntimeOptions o;
  o.of<VaeHeadPadOptions>().channels = 8;
  Trace trace;
  EXPECT_TRUE(at::equal(decode_with(m, io.tensor("z"), o, &trace), ref));
  EXPECT_EQ(trace.get("kernel.vae_head_pad.convs"), 0);
  // The other causal convs are not the head: none of them made a padded copy.
  for (const auto& mod : m->decoder->modules(/*include_self=*/false))
    if (auto* c = dynamic_cast<WanCausalConv3dImpl*>(mod.get()); c && c != m->decoder->conv_out.get())
      EXPECT_FALSE(c->padded_weight.defined());
}
