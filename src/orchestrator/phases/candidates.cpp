// The candidates: the executors' proposals collected and de-duplicated, put in gating order, and gated
// with a compose round after each step.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/error.h"
#include "gates/agent_names.h"
#include "gates/sandboxed_worker.h"
#include "orchestrator/phases/phases.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

// A family's proposals in the executor's order (outbox/<family>/proposals.txt, best first); files it does
// not list (an older outbox) after them, by name. An agent's summary (agent.json) is no proposal.
std::vector<fs::path> proposals_of(const fs::path& box) {
  std::map<std::string, size_t> position;
  {
    std::ifstream in(box / "proposals.txt");
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) position.emplace(line, position.size());
  }
  std::vector<fs::path> mine;
  for (const auto& e : fs::directory_iterator(box))
    if (e.path().extension() == ".json" && e.path().filename().string().rfind(".tmp", 0) != 0 &&
        e.path().filename() != "agent.json")
      mine.push_back(e.path());
  auto key = [&](const fs::path& f) {
    const auto it = position.find(f.filename().string());
    return std::make_pair(it == position.end() ? position.size() : it->second, f.filename().string());
  };
  std::sort(mine.begin(), mine.end(), [&](const fs::path& a, const fs::path& b) { return key(a) < key(b); });
  return mine;
}

// Gates cands[from, to) in the gate phase.
void gate_range(RunState& s, size_t from, size_t to) {
  const auto t0 = Clock::now();
  const int64_t before = s.gate_runs;
  std::vector<Candidate> part(s.cands.begin() + static_cast<std::ptrdiff_t>(from),
                              s.cands.begin() + static_cast<std::ptrdiff_t>(to));
  gate_candidates(s, part, "gate");
  for (size_t k = 0; k < part.size(); ++k) s.cands[from + k].val = part[k].val;
  s.gate_phase.wall_s += std::chrono::duration<double>(Clock::now() - t0).count();
  s.gate_phase.gate_runs += s.gate_runs - before;
}

}  // namespace

size_t order_round_robin(std::vector<Candidate>& cands, size_t workers) {
  size_t first_round = 0;
  std::map<std::string, int> rank;
  std::vector<std::pair<std::pair<int, std::string>, size_t>> order;
  // An agent's proposals take turns of their own beside the built-in searcher of their family.
  auto source = [](const Candidate& c) { return gates::proposal_source(c.m.family, c.m.id); };
  for (size_t k = 0; k < cands.size(); ++k) order.push_back({{rank[source(cands[k])]++, source(cands[k])}, k});
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Candidate> sorted;
  for (const auto& o : order) sorted.push_back(cands[o.second]), first_round += o.first.first == 0;
  cands = std::move(sorted);
  // At least one candidate per worker in the first round, so that no worker idles while it runs.
  return std::min(cands.size(), std::max(first_round, workers));
}

// The plugins an agent handed over (outbox/<name>/plugins/<sha256>.so, executors/agent_plugins.h): each described
// here by a sandboxed worker, never loaded, so that the manifests that pin it parse; the gate requests carry its file.
void describe_outbox_plugins(RunState& s, const fs::path& box) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(gates::agent_plugins_dir(box.string()), ec)) {
    if (e.path().extension() != ".so") continue;
    try {
      const std::string sha = gates::ensure_plugin_described(e.path().string(), s.req.agent_unsandboxed);
      if (sha != e.path().stem().string()) throw Error("its sha256 is " + sha + ", not its name's");
      s.plugin_files[sha] = fs::absolute(e.path()).string();
    } catch (const Error& err) {
      s.progress.warn("ignoring the plugin " + e.path().string() + ": " + err.what());
    }
  }
}

void collect_candidates(RunState& s) {
  s.seen = {gates::manifest_hash(s.base)};
  std::vector<fs::path> files;
  for (const auto& name : executor_names(s.req)) {
    const fs::path box = s.out / "outbox" / name;
    if (!fs::is_directory(box)) continue;
    describe_outbox_plugins(s, box);
    const auto mine = proposals_of(box);
    files.insert(files.end(), mine.begin(), mine.end());
  }
  for (const auto& f : files) {
    try {
      gates::Manifest m = gates::load_manifest(f.string());
      const std::string h = gates::manifest_hash(m);
      if (!s.seen.insert(h).second) continue;
      s.cands.push_back({m, h, std::nullopt, std::nullopt});
    } catch (const Error& e) {
      s.progress.warn(std::string("ignoring a malformed proposal: ") + e.what());
    }
  }
  // Round robin across families, so a budget that ends early has still gated candidates of every family.
  s.first_round = order_round_robin(s.cands, s.worker_count());
}

void gate_and_compose(RunState& s) {
  // After each family's first proposal a compose round (so that a short budget still gates the
  // composition of what was accepted first, which is where the larger tiers come from), then the rest,
  // one candidate per worker at a time, composing after each step: a composition of two families'
  // accepted candidates is gated as soon as its parts exist, before the rest of the long tail (issue 35:
  // the demo's budget ran out with its composition never gated).
  gate_range(s, 0, s.first_round);
  compose_round(s);
  const size_t step = s.worker_count();
  for (size_t k = s.first_round; k < s.cands.size(); k += step) {
    gate_range(s, k, std::min(s.cands.size(), k + step));
    compose_round(s);
  }
  for (auto& c : s.composed) s.cands.push_back(c);
}

}  // namespace autooptim::orchestrator
