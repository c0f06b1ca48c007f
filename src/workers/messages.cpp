#include "workers/messages.h"

#include "base/error.h"

using nlohmann::json;

namespace autooptim::workers {
namespace {

// A value as an error shows it: its JSON, cut short.
std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

json number_or_null(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

MessageReader::MessageReader(const json& j, std::string message) : j_(j), message_(std::move(message)) {
  if (!j_.is_object()) throw Error(message_ + ": expected a JSON object, got " + shown(j_));
}

void MessageReader::fail(const std::string& key, const std::string& what) const {
  throw Error(message_ + ": key '" + key + "': " + what);
}

const json& MessageReader::at(const std::string& key) const {
  const auto it = j_.find(key);
  if (it == j_.end()) throw Error(message_ + ": missing key '" + key + "'");
  return *it;
}

std::string MessageReader::string(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_string()) fail(key, "expected a string, got " + shown(v));
  return v.get<std::string>();
}

int64_t MessageReader::integer(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_number_integer()) fail(key, "expected an integer, got " + shown(v));
  return v.get<int64_t>();
}

double MessageReader::number(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_number()) fail(key, "expected a number, got " + shown(v));
  return v.get<double>();
}

bool MessageReader::boolean(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + shown(v));
  return v.get<bool>();
}

const json& MessageReader::object(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_object()) fail(key, "expected an object, got " + shown(v));
  return v;
}

const json& MessageReader::array(const std::string& key) const {
  const json& v = at(key);
  if (!v.is_array()) fail(key, "expected an array, got " + shown(v));
  return v;
}

std::vector<std::string> MessageReader::strings(const std::string& key) const {
  std::vector<std::string> out;
  for (const json& v : array(key)) {
    if (!v.is_string()) fail(key, "expected an array of strings, got " + shown(at(key)));
    out.push_back(v.get<std::string>());
  }
  return out;
}

std::optional<double> MessageReader::number_or_null(const std::string& key) const {
  const json& v = at(key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) fail(key, "expected a number or null, got " + shown(v));
  return v.get<double>();
}

std::optional<std::string> MessageReader::string_or_null(const std::string& key) const {
  const json& v = at(key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_string()) fail(key, "expected a string or null, got " + shown(v));
  return v.get<std::string>();
}

gates::Manifest MessageReader::manifest(const std::string& key, const std::string& label) const {
  return gates::parse_manifest(object(key), label);
}

std::string MessageReader::kind(const std::vector<std::string>& kinds) const {
  const std::string k = string("kind");
  for (const auto& want : kinds)
    if (k == want) return k;
  std::string list;
  for (const auto& want : kinds) list += (list.empty() ? "" : ", ") + want;
  fail("kind", "'" + k + "' is not one of: " + list);
}

json prompt_to_json(const gates::Prompt& p) {
  return {{"id", p.id}, {"text", p.text}, {"category", p.category}, {"splits", p.splits}};
}

gates::Prompt prompt_from_json(const json& j, const std::string& message) {
  const MessageReader r(j, message);
  gates::Prompt p;
  p.id = r.string("id");
  p.text = r.string("text");
  p.category = r.string("category");
  p.splits = r.strings("splits");
  return p;
}

// --- requests

namespace {

json plugin_to_json(const PluginRef& p) {
  return p.empty() ? json(nullptr) : json{{"file", p.file}, {"without_sandbox", p.without_sandbox}};
}

}  // namespace

// Optional: a request without the key runs no plugin.
PluginRef PluginRef::of_request(const json& msg, const std::string& message) {
  const MessageReader r(msg, message);
  if (!msg.contains("plugin")) return {};
  const json& j = r.at("plugin");
  if (j.is_null()) return {};
  if (!j.is_object()) r.fail("plugin", "expected an object or null");
  const MessageReader p(j, r.message() + ": plugin");
  PluginRef out{p.string("file"), p.boolean("without_sandbox")};
  if (out.file.empty()) r.fail("plugin", "an empty file name");
  return out;
}

json TrialRequest::to_json() const {
  json prompt_list = json::array();
  for (const auto& p : prompts) prompt_list.push_back(prompt_to_json(p));
  return {{"kind", kind},
          {"model", base.model},
          {"base", gates::to_json(base)},
          {"flags", flags},
          {"label", label},
          {"prompts", prompt_list},
          {"n", n},
          {"plugin", plugin_to_json(plugin)}};
}

TrialRequest TrialRequest::from_json(const json& j) {
  const MessageReader r(j, "trial request");
  TrialRequest t;
  t.kind = r.kind({"trial", "traces"});
  t.base = r.manifest("base", "base");
  t.flags = r.object("flags");
  t.label = r.string("label");
  const json& list = r.array("prompts");
  for (size_t i = 0; i < list.size(); ++i)
    t.prompts.push_back(prompt_from_json(list[i], "trial request: prompts[" + std::to_string(i) + "]"));
  t.n = r.integer("n");
  t.plugin = PluginRef::of_request(j, "trial request");
  return t;
}

json ScreenRequest::to_json() const {
  return {{"kind", "screen"},
          {"model", manifest.model},
          {"base", gates::to_json(base)},
          {"manifest", gates::to_json(manifest)},
          {"forwards", forwards},
          {"skip_ratio", number_or_null(skip_ratio)}};
}

ScreenRequest ScreenRequest::from_json(const json& j) {
  const MessageReader r(j, "screen request");
  r.kind({"screen"});
  ScreenRequest s;
  s.base = r.manifest("base", "base");
  s.manifest = r.manifest("manifest", "screened");
  s.forwards = r.integer("forwards");
  s.skip_ratio = r.number_or_null("skip_ratio");
  return s;
}

json CalibrateRequest::to_json() const {
  return {{"kind", "calibrate"}, {"model", base.model}, {"base", gates::to_json(base)}};
}

CalibrateRequest CalibrateRequest::from_json(const json& j) {
  const MessageReader r(j, "calibrate request");
  r.kind({"calibrate"});
  CalibrateRequest c;
  c.base = r.manifest("base", "base");
  return c;
}

json GateRequest::to_json() const {
  return {{"kind", "gate"},
          {"model", manifest.model},
          {"manifest", gates::to_json(manifest)},
          {"split", split},
          {"out_dir", out_dir},
          {"settings", settings},
          {"ledger", ledger ? json(*ledger) : json(nullptr)},
          {"plugin", plugin_to_json(plugin)}};
}

GateRequest GateRequest::from_json(const json& j) {
  const MessageReader r(j, "gate request");
  r.kind({"gate"});
  GateRequest g;
  g.manifest = r.manifest("manifest", "gated");
  g.split = r.string("split");
  g.out_dir = r.string("out_dir");
  g.settings = r.object("settings");
  g.ledger = r.string_or_null("ledger");
  g.plugin = PluginRef::of_request(j, "gate request");
  return g;
}

// --- results

json CalibrateResult::to_json() const {
  return {{"text_s", text_s},
          {"forward_s", forward_s},
          {"decode_s", decode_s},
          {"forwards_per_clip", forwards_per_clip},
          {"clip_estimate_s", clip_estimate_s},
          {"worker_load_s", worker_load_s},
          {"config", config}};
}

CalibrateResult CalibrateResult::from_json(const json& j) {
  const MessageReader r(j, "calibrate result");
  CalibrateResult c;
  c.text_s = r.number("text_s");
  c.forward_s = r.number("forward_s");
  c.decode_s = r.number("decode_s");
  c.forwards_per_clip = r.integer("forwards_per_clip");
  c.clip_estimate_s = r.number("clip_estimate_s");
  c.worker_load_s = r.number("worker_load_s");
  c.config = r.object("config");
  return c;
}

json ScreenResult::to_json() const {
  json j = {{"base_forward_s", base_forward_s},
            {"cand_forward_s", cand_forward_s},
            {"decode", decode},
            {"base_decode_s", base_decode_s},
            {"cand_decode_s", cand_decode_s},
            {"text_s", text_s},
            {"forwards_per_clip", forwards_per_clip},
            {"skip_ratio", number_or_null(skip_ratio)},
            {"base_estimate_s", base_estimate_s},
            {"cand_estimate_s", cand_estimate_s},
            {"estimated_speedup", number_or_null(estimated_speedup)}};
  if (unbounded) j["unbounded"] = *unbounded;
  return j;
}

ScreenResult ScreenResult::from_json(const json& j) {
  const MessageReader r(j, "screen result");
  ScreenResult s;
  s.base_forward_s = r.number("base_forward_s");
  s.cand_forward_s = r.number("cand_forward_s");
  s.decode = r.boolean("decode");
  s.base_decode_s = r.number("base_decode_s");
  s.cand_decode_s = r.number("cand_decode_s");
  s.text_s = r.number("text_s");
  s.forwards_per_clip = r.integer("forwards_per_clip");
  s.skip_ratio = r.number_or_null("skip_ratio");
  s.base_estimate_s = r.number("base_estimate_s");
  s.cand_estimate_s = r.number("cand_estimate_s");
  s.estimated_speedup = r.number_or_null("estimated_speedup");
  if (j.contains("unbounded")) s.unbounded = r.string("unbounded");
  return s;
}

json Response::to_json() const {
  json j = {{"id", id}, {"kind", kind},           {"worker", worker},    {"attempt", attempt},
            {"ok", ok}, {"cancelled", cancelled}, {"finished", finished}};
  if (ok)
    j["result"] = result;
  else
    j["error"] = error;
  if (counters) {
    j["busy_s"] = counters->busy_s;
    j["generating_s"] = counters->generating_s;
    j["generations"] = counters->generations;
    j["peak_rss_kb"] = counters->peak_rss_kb;
  }
  return j;
}

Response Response::from_json(const json& j, const std::string& message) {
  const MessageReader r(j, message);
  Response out;
  out.id = r.string("id");
  out.kind = r.string("kind");
  out.worker = r.string("worker");
  out.attempt = r.integer("attempt");
  out.ok = r.boolean("ok");
  out.cancelled = r.boolean("cancelled");
  out.finished = r.string("finished");
  if (out.ok)
    out.result = r.object("result");
  else
    out.error = r.string("error");
  // A worker's answer carries its counters; a janitor's carries none.
  if (j.contains("busy_s"))
    out.counters =
        Counters{r.number("busy_s"), r.number("generating_s"), r.integer("generations"), r.integer("peak_rss_kb")};
  return out;
}

json GateVerdictResult::to_json() const {
  json checks = json::object();
  for (const auto& [name, c] : gates) checks[name] = {{"pass", c.pass}, {"reason", c.reason}, {"details", c.details}};
  return {{"manifest", manifest},
          {"manifest_hash", manifest_hash},
          {"split", split},
          {"accepted", accepted},
          {"refused", refused},
          {"baseline_seconds", baseline_seconds},
          {"candidate_seconds", candidate_seconds},
          {"speedup", speedup},
          {"psnr", psnr},
          {"ssim", ssim},
          {"failure_signature", failure_signature},
          {"baseline_hash", baseline_hash},
          {"integrity", integrity},
          {"gates", checks}};
}

GateVerdictResult GateVerdictResult::from_json(const json& j) {
  const MessageReader r(j, "gate verdict");
  GateVerdictResult v;
  v.manifest = r.string("manifest");
  v.manifest_hash = r.string("manifest_hash");
  v.split = r.string("split");
  v.accepted = r.boolean("accepted");
  v.refused = r.boolean("refused");
  v.baseline_seconds = r.number("baseline_seconds");
  v.candidate_seconds = r.number("candidate_seconds");
  v.speedup = r.number("speedup");
  v.psnr = r.number("psnr");
  v.ssim = r.number("ssim");
  v.failure_signature = r.string("failure_signature");
  v.baseline_hash = r.string("baseline_hash");
  v.integrity = r.object("integrity");
  for (const auto& [name, check] : r.object("gates").items()) {
    const MessageReader c(check, "gate verdict: gates." + name);
    v.gates[name] = {c.boolean("pass"), c.string("reason"), c.object("details")};
  }
  return v;
}

}  // namespace autooptim::workers
