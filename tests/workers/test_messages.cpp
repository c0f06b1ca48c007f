// The typed messages between the processes and the workers (src/workers/messages.h): each round trips
// through its JSON unchanged, its JSON is the wire format the protocol describes, and each missing or
// mistyped key is an error naming the key and the message.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "error_of.h"
#include "base/error.h"
#include "gates/manifest.h"
#include "workers/messages.h"

namespace autooptim::workers {
namespace {

using nlohmann::json;

json manifest_json(const std::string& id, const std::string& kind, const json& flags) {
  return {{"id", id},
          {"kind", kind},
          {"family", kind == "baseline" ? "none" : "kernel"},
          {"model", "wan22-tiny"},
          {"runtime", "autooptim/1"},
          {"base", kind == "baseline" ? json(nullptr) : json("wan22-tiny/baseline")},
          {"flags", flags},
          {"lossless", kind == "baseline"},
          {"config", gates::to_json(gates::official_config("wan22-tiny"))}};
}

gates::Manifest baseline() {
  return gates::parse_manifest(manifest_json("wan22-tiny/baseline", "baseline", json::object()), "b");
}
gates::Manifest candidate() {
  return gates::parse_manifest(manifest_json("wan22-tiny/kernel/qkv", "patch", {{"fused_qkv", true}}), "c");
}

gates::Prompt prompt(const std::string& id) {
  return {id, "motion", "a red circle moves left", {"smoke", "val", "core"}};
}

using autooptim::test::error_of;

// Every top-level key of `wire` (but the ones in `skip`) left out, then given a value of the wrong type:
// each is an error naming the message and the key.
template <typename Message>
void expect_each_key_checked(const json& wire, const std::string& message, const std::vector<std::string>& skip = {}) {
  for (const auto& [key, value] : wire.items()) {
    if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    json missing = wire;
    missing.erase(key);
    EXPECT_EQ(error_of([&] { Message::from_json(missing); }), message + ": missing key '" + key + "'");
    json mistyped = wire;
    // A type no key of a message takes as valid: an array of a boolean (a string where one is expected).
    mistyped[key] = value.is_array() ? json("not an array") : json::array({true});
    const std::string e = error_of([&] { Message::from_json(mistyped); });
    EXPECT_EQ(e.rfind(message + ": key '" + key + "': expected ", 0), 0u) << key << ": " << e;
  }
}

TEST(Messages, TrialRequestRoundTripsAndKeepsTheWireFormat) {
  TrialRequest r;
  r.kind = "traces";
  r.base = baseline();
  r.flags = {{"fused_qkv", true}};
  r.label = "qkv";
  r.prompts = {prompt("mh-01"), prompt("mh-02")};
  r.n = 2;
  const json wire = r.to_json();
  // The JSON the executors' trial runner wrote before the messages were typed.
  json prompts = json::array();
  for (const auto& p : r.prompts)
    prompts.push_back({{"id", p.id}, {"text", p.text}, {"category", p.category}, {"splits", p.splits}});
  const json before = {{"kind", "traces"}, {"model", "wan22-tiny"}, {"base", gates::to_json(r.base)},
                       {"flags", r.flags}, {"label", "qkv"},        {"prompts", prompts},
                       {"n", 2},           {"plugin", nullptr}};
  EXPECT_EQ(wire.dump(), before.dump());
  const TrialRequest back = TrialRequest::from_json(wire);
  EXPECT_EQ(back.to_json().dump(), wire.dump());
  EXPECT_EQ(back.kind, "traces");
  EXPECT_EQ(back.label, "qkv");
  EXPECT_EQ(back.n, 2);
  ASSERT_EQ(back.prompts.size(), 2u);
  EXPECT_EQ(back.prompts[1].id, "mh-02");
  EXPECT_EQ(back.prompts[1].splits, r.prompts[1].splits);
  EXPECT_EQ(gates::manifest_hash(back.base), gates::manifest_hash(r.base));
}

TEST(Messages, TrialRequestNamesEachMissingOrMistypedKey) {
  TrialRequest r;
  r.base = baseline();
  r.label = "x";
  r.prompts = {prompt("mh-01")};
  // "model" is the envelope's (the server checks it against its own model), not the trial's.
  expect_each_key_checked<TrialRequest>(r.to_json(), "trial request", {"model", "plugin"});
  json bad_kind = r.to_json();
  bad_kind["kind"] = "gate";
  EXPECT_EQ(error_of([&] { TrialRequest::from_json(bad_kind); }),
            "trial request: key 'kind': 'gate' is not one of: trial, traces");
  json no_text = r.to_json();
  no_text["prompts"][0].erase("text");
  EXPECT_EQ(error_of([&] { TrialRequest::from_json(no_text); }), "trial request: prompts[0]: missing key 'text'");
  json bad_split = r.to_json();
  bad_split["prompts"][0]["splits"] = {"val", 3};
  EXPECT_EQ(error_of([&] {
              TrialRequest::from_json(bad_split);
            }).rfind("trial request: prompts[0]: key 'splits': expected an array of strings", 0),
            0u);
  json bad_base = r.to_json();
  bad_base["base"].erase("lossless");
  EXPECT_NE(error_of([&] { TrialRequest::from_json(bad_base); }).find("lossless"), std::string::npos);
  EXPECT_EQ(error_of([] { TrialRequest::from_json(json::array()); }), "trial request: expected a JSON object, got []");
}

TEST(Messages, ScreenRequestRoundTripsWithAndWithoutASkipRatio) {
  ScreenRequest s;
  s.base = baseline();
  s.manifest = candidate();
  s.forwards = 3;
  const json before = {{"kind", "screen"},
                       {"model", "wan22-tiny"},
                       {"base", gates::to_json(s.base)},
                       {"manifest", gates::to_json(s.manifest)},
                       {"forwards", 3},
                       {"skip_ratio", json()}};
  EXPECT_EQ(s.to_json().dump(), before.dump());
  EXPECT_FALSE(ScreenRequest::from_json(s.to_json()).skip_ratio.has_value());
  s.skip_ratio = 0.375;
  const ScreenRequest back = ScreenRequest::from_json(s.to_json());
  ASSERT_TRUE(back.skip_ratio.has_value());
  EXPECT_EQ(*back.skip_ratio, 0.375);
  EXPECT_EQ(back.forwards, 3);
  EXPECT_EQ(back.manifest.id, "wan22-tiny/kernel/qkv");
  EXPECT_EQ(back.to_json().dump(), s.to_json().dump());
  expect_each_key_checked<ScreenRequest>(s.to_json(), "screen request", {"model"});
}

TEST(Messages, CalibrateRequestRoundTrips) {
  CalibrateRequest c{baseline()};
  const json before = {{"kind", "calibrate"}, {"model", "wan22-tiny"}, {"base", gates::to_json(c.base)}};
  EXPECT_EQ(c.to_json().dump(), before.dump());
  EXPECT_EQ(CalibrateRequest::from_json(c.to_json()).to_json().dump(), before.dump());
  expect_each_key_checked<CalibrateRequest>(c.to_json(), "calibrate request", {"model"});
}

TEST(Messages, GateRequestRoundTripsWithAndWithoutALedger) {
  GateRequest g;
  g.manifest = candidate();
  g.split = "val";
  g.out_dir = "/tmp/run/gates/x/val";
  g.settings = {{"timing_repeats", 3}, {"max_prompts", 2}, {"prompts_dir", "prompts"}};
  g.ledger = "/tmp/run/ledger.jsonl";
  const json before = {
      {"kind", "gate"},       {"model", "wan22-tiny"},  {"manifest", gates::to_json(g.manifest)}, {"split", "val"},
      {"out_dir", g.out_dir}, {"settings", g.settings}, {"ledger", "/tmp/run/ledger.jsonl"},      {"plugin", nullptr}};
  EXPECT_EQ(g.to_json().dump(), before.dump());
  const GateRequest back = GateRequest::from_json(g.to_json());
  EXPECT_EQ(back.to_json().dump(), before.dump());
  EXPECT_EQ(back.settings, g.settings);
  g.ledger.reset();
  EXPECT_TRUE(g.to_json()["ledger"].is_null());
  EXPECT_FALSE(GateRequest::from_json(g.to_json()).ledger.has_value());
  g.ledger = "l.jsonl";
  expect_each_key_checked<GateRequest>(g.to_json(), "gate request", {"model", "plugin"});
  // A plugin's file travels with the request; a malformed one is named.
  g.plugin = {"/run/outbox/agent-cache/plugins/p.so", true};
  const GateRequest with = GateRequest::from_json(g.to_json());
  EXPECT_EQ(with.plugin.file, g.plugin.file);
  EXPECT_TRUE(with.plugin.without_sandbox);
  json bad = g.to_json();
  bad["plugin"] = {{"file", ""}, {"without_sandbox", false}};
  EXPECT_EQ(error_of([&] { GateRequest::from_json(bad); }), "gate request: key 'plugin': an empty file name");
  bad["plugin"] = {{"file", "p.so"}};
  EXPECT_EQ(error_of([&] { GateRequest::from_json(bad); }), "gate request: plugin: missing key 'without_sandbox'");
}

TEST(Messages, CalibrateResultRoundTrips) {
  CalibrateResult c;
  c.text_s = 0.5;
  c.forward_s = 0.25;
  c.decode_s = 1.5;
  c.forwards_per_clip = 100;
  c.clip_estimate_s = 27.0;
  c.worker_load_s = 3.0;
  c.config = gates::to_json(gates::official_config("wan22-tiny"));
  const json before = {
      {"text_s", 0.5},           {"forward_s", 0.25},    {"decode_s", 1.5},   {"forwards_per_clip", 100},
      {"clip_estimate_s", 27.0}, {"worker_load_s", 3.0}, {"config", c.config}};
  EXPECT_EQ(c.to_json().dump(), before.dump());
  EXPECT_EQ(CalibrateResult::from_json(c.to_json()).to_json().dump(), before.dump());
  expect_each_key_checked<CalibrateResult>(c.to_json(), "calibrate result");
}

TEST(Messages, ScreenResultRoundTripsBoundedAndUnbounded) {
  ScreenResult s;
  s.base_forward_s = 0.2;
  s.cand_forward_s = 0.1;
  s.decode = true;
  s.base_decode_s = 1.0;
  s.cand_decode_s = 0.9;
  s.text_s = 0.05;
  s.forwards_per_clip = 100;
  s.skip_ratio = 0.5;
  s.base_estimate_s = 21.05;
  s.cand_estimate_s = 5.95;
  s.estimated_speedup = 21.05 / 5.95;
  EXPECT_FALSE(s.to_json().contains("unbounded"));
  EXPECT_EQ(ScreenResult::from_json(s.to_json()).to_json().dump(), s.to_json().dump());
  expect_each_key_checked<ScreenResult>(s.to_json(), "screen result");
  s.skip_ratio.reset();
  s.estimated_speedup.reset();
  s.unbounded = "a step cache without a measured skip ratio";
  const json wire = s.to_json();
  EXPECT_TRUE(wire["estimated_speedup"].is_null());
  EXPECT_TRUE(wire["skip_ratio"].is_null());
  const ScreenResult back = ScreenResult::from_json(wire);
  EXPECT_EQ(back.unbounded.value_or(""), "a step cache without a measured skip ratio");
  EXPECT_EQ(back.to_json().dump(), wire.dump());
  json bad = wire;
  bad["unbounded"] = 1;
  EXPECT_EQ(error_of([&] { ScreenResult::from_json(bad); }),
            "screen result: key 'unbounded': expected a string, got 1");
}

TEST(Messages, GateVerdictRoundTripsInGateVerdictsOwnLayout) {
  GateVerdictResult v;
  v.manifest = "wan22-tiny/kernel/qkv";
  v.manifest_hash = "abc";
  v.split = "val";
  v.accepted = false;
  v.refused = false;
  v.baseline_seconds = 2.5;
  v.candidate_seconds = 2.0;
  v.speedup = 1.25;
  v.psnr = 41.5;
  v.ssim = 0.99;
  v.failure_signature = "slowdown";
  v.baseline_hash = "def";
  v.integrity = {{"threads", 2}};
  v.gates["performance"] = {false, "1.25x < 1.5x", {{"margin", 0.1}}};
  v.gates["artifacts"] = {true, "", json::object()};
  // The layout of gates::GateVerdict::to_json (gates/gate.cpp).
  const json before = {
      {"manifest", v.manifest},
      {"manifest_hash", "abc"},
      {"split", "val"},
      {"accepted", false},
      {"refused", false},
      {"baseline_seconds", 2.5},
      {"candidate_seconds", 2.0},
      {"speedup", 1.25},
      {"psnr", 41.5},
      {"ssim", 0.99},
      {"failure_signature", "slowdown"},
      {"baseline_hash", "def"},
      {"integrity", {{"threads", 2}}},
      {"gates",
       {{"artifacts", {{"pass", true}, {"reason", ""}, {"details", json::object()}}},
        {"performance", {{"pass", false}, {"reason", "1.25x < 1.5x"}, {"details", {{"margin", 0.1}}}}}}}};
  EXPECT_EQ(v.to_json().dump(), before.dump());
  const GateVerdictResult back = GateVerdictResult::from_json(before);
  EXPECT_EQ(back.to_json().dump(), before.dump());
  EXPECT_FALSE(back.gates.at("performance").pass);
  expect_each_key_checked<GateVerdictResult>(before, "gate verdict");
  json no_pass = before;
  no_pass["gates"]["performance"].erase("pass");
  EXPECT_EQ(error_of([&] { GateVerdictResult::from_json(no_pass); }),
            "gate verdict: gates.performance: missing key 'pass'");
}

// A worker's answer, as Server::serve_one writes it: the result when ok, and the worker's counters.
TEST(Messages, AWorkersResponseRoundTripsWithItsCounters) {
  const json wire = {{"id", "orchestrator-7-3-a1b2c3"},
                     {"kind", "gate"},
                     {"worker", "cpu0"},
                     {"attempt", 1},
                     {"ok", true},
                     {"cancelled", false},
                     {"finished", "2026-12-06T22:00:00Z"},
                     {"result", {{"accepted", true}}},
                     {"busy_s", 12.5},
                     {"generating_s", 10.25},
                     {"generations", 7},
                     {"peak_rss_kb", 123456}};
  const Response r = Response::from_json(wire);
  EXPECT_TRUE(r.ok);
  EXPECT_FALSE(r.cancelled);
  EXPECT_EQ(r.worker, "cpu0");
  EXPECT_EQ(r.attempt, 1);
  EXPECT_EQ(r.result, json({{"accepted", true}}));
  ASSERT_TRUE(r.counters.has_value());
  EXPECT_DOUBLE_EQ(r.busy_s(), 12.5);
  EXPECT_EQ(r.counters->generations, 7);
  EXPECT_EQ(r.counters->peak_rss_kb, 123456);
  EXPECT_EQ(r.to_json().dump(), wire.dump());  // no "error" on an answer that is ok
  // Each key is checked; "busy_s" left out means no counters (a janitor's answer, below).
  expect_each_key_checked<Response>(wire, "worker response", {"busy_s"});
  json mistyped = wire;
  mistyped["busy_s"] = "12.5";
  EXPECT_EQ(error_of([&] { Response::from_json(mistyped); }),
            "worker response: key 'busy_s': expected a number, got \"12.5\"");
}

// A failed or cancelled answer carries the error and no result; one a janitor wrote for a request that killed
// max_attempts workers (Client::requeue_dead) has no counters either: 0 s on a worker, not an error.
TEST(Messages, AFailedCancelledOrGivenUpResponseReadsWithoutAResult) {
  const json cancelled = {
      {"id", "r1"},    {"kind", "gate"},      {"worker", "cpu0"}, {"attempt", 0},
      {"ok", false},   {"cancelled", true},   {"finished", "t"},  {"error", "cancelled by its client"},
      {"busy_s", 3.0}, {"generating_s", 2.0}, {"generations", 1}, {"peak_rss_kb", 1000}};
  const Response c = Response::from_json(cancelled);
  EXPECT_FALSE(c.ok);
  EXPECT_TRUE(c.cancelled);
  EXPECT_EQ(c.error, "cancelled by its client");
  EXPECT_DOUBLE_EQ(c.busy_s(), 3.0);
  EXPECT_EQ(c.to_json().dump(), cancelled.dump());  // no "result" on an answer that is not ok
  expect_each_key_checked<Response>(cancelled, "worker response", {"busy_s"});

  const json given_up = {
      {"id", "r2"},
      {"kind", "trial"},
      {"worker", "cpu1"},
      {"attempt", 3},
      {"ok", false},
      {"cancelled", false},
      {"finished", "t"},
      {"error", "the request was in progress on 3 workers that died (last: cpu1); not queued again"}};
  const Response g = Response::from_json(given_up, "response to r2");
  EXPECT_FALSE(g.ok);
  EXPECT_FALSE(g.cancelled);
  EXPECT_FALSE(g.counters.has_value());
  EXPECT_DOUBLE_EQ(g.busy_s(), 0.0);
  EXPECT_EQ(g.to_json().dump(), given_up.dump());
  expect_each_key_checked<Response>(given_up, "worker response");

  // The counters come together: one of them without the others is an error naming the missing one.
  json partial = given_up;
  partial["busy_s"] = 1.0;
  EXPECT_EQ(error_of([&] { Response::from_json(partial, "response to r2"); }),
            "response to r2: missing key 'generating_s'");
  // An answer that says ok must carry its result; one that says not ok, its error.
  json ok_without_result = given_up;
  ok_without_result["ok"] = true;
  EXPECT_EQ(error_of([&] { Response::from_json(ok_without_result, "response to r2"); }),
            "response to r2: missing key 'result'");
  json failed_without_error = given_up;
  failed_without_error.erase("error");
  EXPECT_EQ(error_of([&] { Response::from_json(failed_without_error, "response to r2"); }),
            "response to r2: missing key 'error'");
}

}  // namespace
}  // namespace autooptim::workers
