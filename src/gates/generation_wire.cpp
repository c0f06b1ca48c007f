#include "gates/generation_wire.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/json_read.h"

namespace autooptim::gates {

using nlohmann::json;

namespace {

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(std::string("the generation worker's pipe: ") + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Waits until fd is readable, asking `check` every 100 ms.
void await_readable(int fd, const WaitCheck& check) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 100);
    if (r > 0) return;
    if (r < 0 && errno != EINTR) throw Error(std::string("the generation worker's pipe: ") + std::strerror(errno));
    if (check) {
      const std::string why = check();
      if (!why.empty()) throw Error(why);
    }
  }
}

// Reads up to n bytes (at least 1); 0 at end of file.
size_t read_some(int fd, char* p, size_t n, const WaitCheck& check) {
  for (;;) {
    await_readable(fd, check);
    const ssize_t r = ::read(fd, p, n);
    if (r >= 0) return static_cast<size_t>(r);
    if (errno != EINTR && errno != EAGAIN)
      throw Error(std::string("the generation worker's pipe: ") + std::strerror(errno));
  }
}

void read_exact(int fd, char* p, size_t n, const WaitCheck& check) {
  while (n > 0) {
    const size_t r = read_some(fd, p, n, check);
    if (r == 0) throw Error("the generation worker closed its pipe in the middle of a clip");
    p += r;
    n -= r;
  }
}

// One byte at a time up to the newline: the header is small, and nothing after it may be consumed here.
std::string read_header_line(int fd, const WaitCheck& check) {
  std::string line;
  char c = 0;
  for (;;) {
    if (read_some(fd, &c, 1, check) == 0)
      throw Error(line.empty() ? "the generation worker closed its pipe"
                               : "the generation worker's message ended early");
    if (c == '\n') return line;
    line.push_back(c);
    if (line.size() > kMaxHeaderBytes)
      throw Error("the generation worker's message header is over " + std::to_string(kMaxHeaderBytes) + " bytes");
  }
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

void write_message(int fd, json header, const at::Tensor& video) {
  if (video.defined()) {
    if (video.scalar_type() != at::kFloat || !video.is_contiguous() || !video.device().is_cpu())
      throw Error("write_message: the clip must be contiguous float32 on the CPU");
    header["video_shape"] = video.sizes().vec();
  }
  const std::string line = header.dump() + "\n";
  write_all(fd, line.data(), line.size());
  if (video.defined())
    write_all(fd, static_cast<const char*>(video.data_ptr()), static_cast<size_t>(video.numel()) * sizeof(float));
}

WireMessage read_message(int fd, const std::vector<int64_t>& video_shape, const WaitCheck& check) {
  WireMessage m;
  m.header = runtime::parse_json_text(read_header_line(fd, check), "the generation worker's message");
  if (!m.header.is_object()) throw Error("the generation worker's message is not a JSON object");
  const bool has_video = m.header.contains("video_shape");
  if (!has_video) return m;  // an answer without a clip (a failed run): the caller decides
  const json& s = m.header["video_shape"];
  std::vector<int64_t> got;
  if (s.is_array())
    for (const auto& d : s)
      if (d.is_number_integer()) got.push_back(d.get<int64_t>());
  if (video_shape.empty()) throw Error("the generation worker sent a clip where none was asked for");
  if (got != video_shape || got.size() != s.size())
    throw Error("the generation worker sent a clip of shape " + s.dump() + ", the manifest's is " +
                shape_text(video_shape));
  m.video = at::empty(video_shape, at::kFloat);
  read_exact(fd, static_cast<char*>(m.video.data_ptr()), static_cast<size_t>(m.video.numel()) * sizeof(float), check);
  return m;
}

json stage_times_to_json(const runtime::StageTimes& t) {
  return {{"text_encoding", t.text_encoding},   {"text_tokens", t.text_tokens},
          {"image_encoding", t.image_encoding}, {"denoising", t.denoising},
          {"denoising_cpu", t.denoising_cpu},   {"decoding", t.decoding},
          {"step_seconds", t.step_seconds},     {"step_forwards", t.step_forwards},
          {"step_blocks", t.step_blocks},       {"step_sparse_attention", t.step_sparse_attention}};
}

runtime::StageTimes stage_times_from_json(const json& j) {
  runtime::StageTimes t;
  try {
    t.text_encoding = j.at("text_encoding").get<double>();
    t.text_tokens = j.at("text_tokens").get<int64_t>();
    t.image_encoding = j.at("image_encoding").get<double>();
    t.denoising = j.at("denoising").get<double>();
    t.denoising_cpu = j.at("denoising_cpu").get<double>();
    t.decoding = j.at("decoding").get<double>();
    t.step_seconds = j.at("step_seconds").get<std::vector<double>>();
    t.step_forwards = j.at("step_forwards").get<std::vector<int64_t>>();
    t.step_blocks = j.at("step_blocks").get<std::vector<int64_t>>();
    t.step_sparse_attention = j.at("step_sparse_attention").get<std::vector<int64_t>>();
  } catch (const json::exception& e) {
    throw Error(std::string("the generation worker's stage times: ") + e.what());
  }
  return t;
}

runtime::Trace trace_from_json(const json& j, const std::string& whose) {
  if (!j.is_object()) throw Error(whose + " counters are not an object");
  runtime::Trace t;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_number()) throw Error(whose + " counter '" + k + "' is not a number");
    t.add(k, v.get<double>());
  }
  return t;
}

}  // namespace autooptim::gates
