// The gate's messages to and from a generation worker (gates/generation_wire.h), over a real pipe: a header and a
// clip arrive whole; a clip of another shape, a clip nobody asked for, a header over the limit, a peer that ends
// in the middle of a clip and a wait the caller gives up on are each an error naming the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <thread>

#include "error_of.h"
#include "base/error.h"
#include "gates/generation_wire.h"

namespace autooptim::gates {
namespace {

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
};

using autooptim::test::error_of;

TEST(GenerationWire, HeaderAndClipArriveWhole) {
  Pipe p;
  const at::Tensor clip = at::rand({3, 3, 8, 10});
  std::thread writer([&] { write_message(p.w, {{"ok", true}, {"n", 7}}, clip); });
  const WireMessage m = read_message(p.r, {3, 3, 8, 10}, nullptr);
  writer.join();
  EXPECT_EQ(m.header["n"], 7);
  EXPECT_EQ(m.header["video_shape"], nlohmann::json({3, 3, 8, 10}));
  ASSERT_TRUE(m.video.defined());
  EXPECT_TRUE(at::equal(m.video, clip));
}

TEST(GenerationWire, AnswerWithoutClipIsTheCallersToJudge) {
  Pipe p;
  write_message(p.w, {{"ok", false}, {"error", "out of memory"}});
  const WireMessage m = read_message(p.r, {3, 3, 8, 10}, nullptr);
  EXPECT_FALSE(m.video.defined());
  EXPECT_EQ(m.header["error"], "out of memory");
}

TEST(GenerationWire, ClipOfAnotherShapeIsRefused) {
  std::signal(SIGPIPE, SIG_IGN);  // the reader closes its end while the writer may still be writing
  Pipe p;
  std::thread writer([&] {
    try {
      write_message(p.w, {{"ok", true}}, at::zeros({2, 3, 8, 10}));
    } catch (const Error&) {  // the reader stops reading: the write may fail once the pipe closes
    }
  });
  EXPECT_NE(error_of([&] {
              read_message(p.r, {3, 3, 8, 10}, nullptr);
            }).find("sent a clip of shape [2,3,8,10]"),
            std::string::npos);
  ::close(p.r);
  p.r = -1;
  writer.join();
}

TEST(GenerationWire, ClipNobodyAskedForIsRefused) {
  Pipe p;
  write_message(p.w, {{"kind", "hello"}}, at::zeros({1, 3, 2, 2}));
  EXPECT_NE(error_of([&] { read_message(p.r, {}, nullptr); }).find("where none was asked for"), std::string::npos);
}

TEST(GenerationWire, HeaderOverTheLimitIsRefused) {
  std::signal(SIGPIPE, SIG_IGN);
  Pipe p;
  std::thread writer([&] {
    try {
      write_message(p.w, {{"junk", std::string(kMaxHeaderBytes + 10, 'x')}});
    } catch (const Error&) {
    }
  });
  EXPECT_NE(error_of([&] { read_message(p.r, {}, nullptr); }).find("header is over"), std::string::npos);
  ::close(p.r);
  p.r = -1;
  writer.join();
}

TEST(GenerationWire, PeerEndingMidClipIsAnError) {
  Pipe p;
  const std::string header = R"({"ok":true,"video_shape":[1,3,4,4]})"
                             "\n";
  ASSERT_EQ(::write(p.w, header.data(), header.size()), static_cast<ssize_t>(header.size()));
  const float some[5] = {0, 0, 0, 0, 0};
  ASSERT_EQ(::write(p.w, some, sizeof some), static_cast<ssize_t>(sizeof some));
  ::close(p.w);
  p.w = -1;
  EXPECT_NE(error_of([&] {
              read_message(p.r, {1, 3, 4, 4}, nullptr);
            }).find("in the middle of a clip"),
            std::string::npos);
}

TEST(GenerationWire, WaitEndsWithTheCallersReason) {
  Pipe p;
  int asked = 0;
  const std::string e = error_of([&] {
    read_message(p.r, {}, [&]() -> std::string { return ++asked >= 3 ? "the worker ended (signal 9)" : ""; });
  });
  EXPECT_EQ(e, "the worker ended (signal 9)");
  EXPECT_EQ(asked, 3);
}

TEST(GenerationWire, StageTimesAndCountersRoundTrip) {
  runtime::StageTimes t;
  t.text_encoding = 0.5;
  t.denoising = 2.25;
  t.step_forwards = {2, 2, 1};
  const runtime::StageTimes back = stage_times_from_json(stage_times_to_json(t));
  EXPECT_EQ(back.denoising, 2.25);
  EXPECT_EQ(back.step_forwards, t.step_forwards);
  EXPECT_NE(error_of([] { stage_times_from_json({{"denoising", 1.0}}); }).find("stage times"), std::string::npos);
  const runtime::Trace tr = trace_from_json({{"cache.skipped", 3.0}});
  EXPECT_EQ(tr.get("cache.skipped"), 3.0);
  EXPECT_NE(error_of([] { trace_from_json({{"x", "many"}}); }).find("'x' is not a number"), std::string::npos);
}

}  // namespace
}  // namespace autooptim::gates
