#include "executors/agent_tools.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/utc_time.h"
#include "runtime/techniques/registry.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::executors {
namespace {

namespace tech = runtime::techniques;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A file-name-safe slug of at most 40 characters: lower-case letters, digits and '-'.
std::string slug_of(const std::string& text) {
  std::string s;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u))
      s += static_cast<char>(std::tolower(u));
    else if (!s.empty() && s.back() != '-')
      s += '-';
    if (s.size() >= 40) break;
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s;
}

}  // namespace

AgentRecord::AgentRecord(std::string outbox_dir) : dir_(std::move(outbox_dir)), start_(Clock::now()) {
  fs::create_directories(dir_);
}

void AgentRecord::call(const std::string& tool, const json& args, const AgentToolReply& reply, double seconds) {
  ++calls_;
  json row = {{"at_s", since(start_)}, {"tool", tool}, {"args", args}, {"ok", reply.ok}, {"seconds", seconds}};
  if (reply.ok)
    row["result"] = reply.result;
  else
    row["error"] = reply.error;
  gates::append_line_durable((fs::path(dir_) / "tools.jsonl").string(), row.dump());
}

void AgentRecord::blocked(const std::string& what, const std::string& detail) {
  ++blocks_;
  const json row = {{"at_s", since(start_)}, {"at", base::utc_timestamp()}, {"what", what}, {"detail", detail}};
  gates::append_line_durable((fs::path(dir_) / "blocked.jsonl").string(), row.dump());
}

AgentTools::AgentTools(const ExecutorRequest& req, TrialRunner& run, Outbox& box, AgentRecord& record,
                       AgentPlugins& plugins)
    : req_(req), run_(run), box_(box), record_(record), plugins_(plugins), base_(run.base()), start_(Clock::now()) {}

double AgentTools::wall_left_s() const {
  return req_.agent.deadline_s > 0 ? std::max(0.0, req_.agent.deadline_s - since(start_)) : 1e9;
}

AgentToolReply AgentTools::handle(const AgentToolRequest& r) {
  const auto t0 = Clock::now();
  AgentToolReply reply;
  // Every call is recorded on disk: past the limit a flood of cheap calls is refused unrecorded (once named).
  if (record_.calls() >= kMaxAgentToolCalls) {
    reply.error = "tool call limit: " + std::to_string(kMaxAgentToolCalls) + " calls per agent";
    if (!limit_named_) record_.blocked(r.tool, reply.error);
    limit_named_ = true;
    return reply;
  }
  try {
    if (r.tool == "techniques")
      reply.result = techniques();
    else if (r.tool == "trial")
      reply.result = trial(r);
    else if (r.tool == "calibrate")
      reply.result = calibrate(r);
    else if (r.tool == "budget")
      reply.result = budget();
    else if (r.tool == "propose")
      reply.result = propose(r);
    else if (r.tool == "plugin")
      reply.result = plugin(r);
    else  // log: the note is the record
      reply.result = {{"logged", true}};
    reply.ok = true;
  } catch (const Refusal& no) {
    reply.error = no.error;
    if (no.blocked) record_.blocked(r.tool, no.error);
  } catch (const std::exception& e) {
    reply.error = e.what();
  }
  json args = r.to_json();
  if (args["manifest"].is_object()) args["manifest"] = args["manifest"].value("flags", json());  // the flags suffice
  AgentToolReply recorded = reply;
  if (r.tool == "techniques" && reply.ok) recorded.result = "(the registry's listing)";
  record_.call(r.tool, args, recorded, since(t0));
  return reply;
}

json AgentTools::techniques() const { return tech::registry_to_json(tech::SearchContext{run_.steps(), run_.on_gpu()}); }

json AgentTools::budget() const {
  return {{"trials_used", run_.trials()},
          {"trials_left", std::max<int64_t>(0, req_.budget_trials - run_.trials())},
          {"budget_trials", req_.budget_trials},
          {"wall_s_left", req_.agent.deadline_s > 0 ? json(wall_left_s()) : json()},
          {"device_s_used", record_.trial_s},
          {"proposals", box_.proposed()},
          {"proposals_left", std::max<int64_t>(0, req_.agent.max_proposals - box_.proposed())},
          {"visible_prompts", run_.prompts().size()}};
}

std::vector<gates::Prompt> AgentTools::prompts_of(const AgentToolRequest& r) const {
  const auto& visible = run_.prompts();
  if (!r.prompt_ids.empty()) {
    std::vector<gates::Prompt> out;
    for (const auto& id : r.prompt_ids) {
      const auto it = std::find_if(visible.begin(), visible.end(), [&](const gates::Prompt& p) { return p.id == id; });
      if (it == visible.end())
        throw Refusal{"a trial on a prompt outside the visible set ('" + id.substr(0, 80) +
                          "'): agents measure on the visible prompts only",
                      true};
      out.push_back(*it);
    }
    return out;
  }
  const int64_t n = r.prompts == 0 ? 1 : r.prompts;
  if (n > static_cast<int64_t>(visible.size()))
    throw Refusal{"--prompts " + std::to_string(n) + ": there are " + std::to_string(visible.size()) +
                  " visible prompts"};
  return {visible.begin(), visible.begin() + n};
}

json AgentTools::trial(const AgentToolRequest& r) {
  // The prompts first: a held-out prompt is the breach to name, whatever else is wrong with the request.
  const std::vector<gates::Prompt> prompts = prompts_of(r);
  if (r.manifest.is_null()) throw Refusal{"trial: no manifest"};
  const gates::Manifest patch = patch_of_file(r.manifest);
  const json& flags = patch.flags;
  if (!run_.can_measure(req_.budget_trials))
    throw Refusal{TrialRunner::stop_requested()
                      ? "the run is stopping: no more trials"
                      : "budget: all " + std::to_string(req_.budget_trials) + " trials of the family are used",
                  !TrialRunner::stop_requested()};
  if (wall_left_s() <= 0) throw Refusal{"budget: the agent's wall time is spent", true};
  const auto t0 = Clock::now();
  workers::TrialResult t =
      run_.measure_on(flags, "agent trial " + std::to_string(++trials_), prompts, plugins_.ref(patch.plugin));
  const double s = since(t0);
  record_.trial_s += s;
  box_.log(t);
  json out = t.to_json();
  out["seconds"] = s;
  const json left = budget();
  out["trials_left"] = left["trials_left"];
  out["wall_s_left"] = left["wall_s_left"];
  return out;
}

// The technique's registered calibration on the first visible prompt (as the cache executor runs it): the flags
// fragment to merge into the agent's manifests. One run, charged as one trial.
json AgentTools::calibrate(const AgentToolRequest& r) {
  const tech::Technique* t = tech::find(r.technique);
  if (!t || !t->calibration)
    throw Refusal{"calibrate: '" + r.technique + "' has no calibration (autooptim agent techniques lists them)"};
  if (!agent_may_use(req_.agent.family, *t))
    throw Refusal{"calibrate: '" + r.technique + "' is not a technique of the " + req_.agent.family + " family"};
  if (!run_.can_measure(req_.budget_trials))
    throw Refusal{"budget: all " + std::to_string(req_.budget_trials) + " trials of the family are used", true};
  const auto t0 = Clock::now();
  const json fitted = t->calibration->fit(run_.traces(t->calibration->flags, "agent calibrate " + t->name, 1));
  run_.count_trial();
  record_.trial_s += since(t0);
  return {{"flags", fitted},
          {"note", "merge these flags into your manifest's flags"},
          {"trials_left", budget()["trials_left"]}};
}

json AgentTools::propose(const AgentToolRequest& r) {
  if (r.manifest.is_null()) throw Refusal{"propose: no manifest"};
  if (box_.proposed() >= req_.agent.max_proposals)
    throw Refusal{"proposal limit: " + std::to_string(req_.agent.max_proposals) + " proposals per agent", true};
  if (r.why.empty()) throw Refusal{"propose: --why is required (the report shows it)"};
  const json flags = patch_of_file(r.manifest).flags;
  // A lossless claim: the manifest's own, else the registry's (every technique it turns on is lossless).
  bool lossless = true;
  if (r.manifest.contains("lossless") && r.manifest["lossless"].is_boolean()) {
    lossless = r.manifest["lossless"].get<bool>();
  } else {
    gates::Manifest m = base_;
    m.flags = flags;
    for (const auto& name : tech::techniques_on(gates::to_runtime_options(m)))
      lossless = lossless && tech::find(name) && tech::find(name)->lossless;
  }
  std::string slug = r.manifest.contains("id") && r.manifest["id"].is_string()
                         ? slug_of(r.manifest["id"].get<std::string>().substr(
                               r.manifest["id"].get<std::string>().find_last_of('/') + 1))
                         : "";
  if (slug.empty()) slug = "p" + std::to_string(box_.proposed() + 1);
  const std::string stem = slug;
  const std::string prefix = req_.agent.proposal_prefix();
  for (int k = 2; fs::exists(fs::path(box_.dir()) / (prefix + slug + ".json")); ++k)
    slug = stem + "-" + std::to_string(k);
  const std::string path = box_.propose(slug, flags, lossless, "agent " + req_.agent.name() + ": " + r.why);
  return {{"id", base_.model + "/" + req_.family + "/" + prefix + slug},
          {"file", fs::path(path).filename().string()},
          {"lossless", lossless},
          {"proposals_left", std::max<int64_t>(0, req_.agent.max_proposals - box_.proposed())},
          {"note", "gated after the exploration; the run's report has the verdict"}};
}

// The plugin is copied out of the workspace and described by a sandboxed worker; its flags are valid from then on.
json AgentTools::plugin(const AgentToolRequest& r) {
  if (r.file.empty()) throw Refusal{"plugin: no file (autooptim agent plugin FILE.so)"};
  try {
    return plugins_.take(r.file);
  } catch (const PluginBreach& e) {
    throw Refusal{e.what(), true};
  }
}

gates::Manifest AgentTools::patch_of_file(const json& m) const {
  const std::string fam = req_.family;
  json flags;
  if (m.contains("kind")) {
    // What the manifest claims to be, before anything else about it: a baseline or another family's is a breach.
    const std::string kind = m["kind"].is_string() ? m["kind"].get<std::string>() : "?";
    const std::string family = m.contains("family") && m["family"].is_string() ? m["family"].get<std::string>() : "";
    if (kind != "patch")
      throw Refusal{"a manifest of kind '" + kind +
                        "': agents measure and propose patches of the pinned baseline, "
                        "never a baseline or a control of their own",
                    true};
    if (family != fam)
      throw Refusal{"a manifest of family '" + family + "': this agent proposes for '" + fam + "' only", true};
    gates::Manifest parsed;
    try {
      parsed = gates::parse_manifest(m, "the agent's manifest");
    } catch (const std::exception& e) {
      throw Refusal{e.what(), m.contains("flags") && m["flags"].is_object() && m["flags"].contains("redteam")};
    }
    if (parsed.model != base_.model || parsed.config != base_.config)
      throw Refusal{"a manifest of another model or configuration: the run's is " + base_.model +
                    " at its pinned "
                    "baseline's configuration (workspace/baseline.json)"};
    flags = parsed.flags;
  } else {
    for (const auto& [k, v] : m.items())
      if (k != "flags" && k != "lossless" && k != "id" && k != "description" && k != "plugin")
        throw Refusal{"the manifest file: unknown key '" + k + "' ({\"flags\": {...}} or a patch manifest)"};
    if (!m.contains("flags") || !m["flags"].is_object()) throw Refusal{"the manifest file has no \"flags\" object"};
    // A fragment: on top of the baseline's flags (its settings stay; what the agent names changes).
    flags = base_.flags;
    flags.merge_patch(m["flags"]);
  }
  if (flags.contains("redteam"))
    throw Refusal{"red-team switches: they exist for the harness's own tests and never reach a run's workers", true};
  // As a patch of the family: the registry's checks of every flag, and the family's rule.
  const gates::Manifest checked = patch_of(base_, fam, "agent-trial", flags, false, "", "the agent's flags");
  if (req_.agent.family == "vae")
    for (const auto& t : tech::techniques_on(gates::to_runtime_options(checked)))
      if (t.rfind("vae_", 0) != 0)
        throw Refusal{"technique '" + t + "': the vae agent uses the VAE's techniques (vae_*) only", true};
  // A pin the file names must be the one its flags need (patch_of pins the plugin whose techniques are on).
  const json pin = m.value("plugin", json());
  if (!pin.is_null() && pin != json(checked.plugin))
    throw Refusal{"the manifest file pins plugin " + pin.dump() + ", but its flags turn on " +
                  (checked.plugin.empty() ? std::string("no plugin's technique") : "plugin " + checked.plugin + "'s")};
  return checked;
}

}  // namespace autooptim::executors
