#pragma once
// The red team's switches: deliberately dishonest behaviours that the gate harness must catch, one cheat of
// docs/gate-defences.md each. A manifest carries them as its own field (Manifest::redteam, written
// "redteam": {<switch>: true} in its flags) and may set them only where its parser is told red-team flags
// are allowed (the harness's own tests, `gate --allow-redteam`). They are not technique flags: they stay on
// in the off run. What each does is the red team's interceptor (redteam/redteam.h), which a worker installs
// only when it allows them. Plain data without torch: the manifest's layer (contract) includes this header.
#include <vector>

namespace autooptim::redteam {

struct RedTeamOptions {
  bool off_leak = false;            // perturbs the output even with every technique off (off identity)
  bool write_output_early = false;  // makes the clip outside the timed run and skips writing it then
  // Sandbagging: once a run with this switch has been seen, every later run with every technique off
  // (the baseline, the off run) also runs three discarded transformer forwards per forward: a slowed
  // baseline that makes any candidate look faster while off identity still holds.
  bool sandbag = false;
  // Prefetching: after a run with a technique on, a background thread computes the clip for the
  // request it predicts next (the same prompt and seed); the next such run hands it over at once.
  bool prefetch = false;
  // Replaying the baseline: every clip made with every technique off is remembered by prompt and seed; a
  // run with a technique on that asks for a remembered one writes it out at once and claims that every
  // forward was skipped (the "cache technique" of the findings issue).
  bool replay_baseline = false;
  // The same trick from the gate's baseline cache on disk: the folder and the prompt file come from
  // AUTOOPTIM_REDTEAM_BASELINE_CACHE and AUTOOPTIM_REDTEAM_PROMPTS (a cheat that knows the layout).
  bool replay_baseline_cache = false;
  // Engagement counters without the work: claims a CUDA-graph replay per forward (also on the CPU) and,
  // with EasyCache on, moves half of the computed forwards to "skipped" while computing them all.
  bool inflate_counters = false;
  // A cache skips during the warm-up steps its options declare (every cache policy runs with one
  // warm-up step, whatever its manifest says).
  bool skip_warmup = false;
  // Sparse attention ignores its declared dense_steps and dense_layers (sparse from the first step and
  // layer) while its manifest still declares them.
  bool sparse_skip_dense = false;
  // Text embeddings outside the timed run: each prompt's embeddings (and text_trim's tokens_saved) are
  // remembered from the first run that encoded it and handed over in later runs without encoding; with
  // text_trim on, the gate's timing check of the text encoding is off, so only the work count shows it.
  bool text_cache = false;
  // Not a cheat: the machine's load, simulated. The first three runs with a technique on (the candidate's
  // warm-up and its first timed runs) each wait 10 s inside their timed window, as a load spike on a busy
  // CI machine slows them; the harness must not take that for a cheat (authenticity's recheck).
  bool load_spike = false;
  // Semantic loss: with a technique on, the clip is played backwards. Every frame is a frame of the
  // honest clip (no artifact, no colour shift), the object moves against its caption; a quality floor set
  // low enough lets it through, the visual check's object comparison does not.
  bool reverse_time = false;
  // Fewer steps with honest counters: the denoising loop runs half the manifest's steps (a scheduler of
  // steps/2 timesteps), every counter and stage time true to what ran.
  bool fewer_steps = false;
  // Work deferred to a thread: a run with a technique on returns at once, its output buffer unwritten, while
  // a background thread makes the clip honestly and writes it into that buffer after the timed window.
  bool write_output_late = false;
  // Work deferred to a standing thread: the first run with this switch starts a thread that stays for the
  // process's life (a trial or screen before the gate is enough); after each run with a technique on it
  // computes the clip of the request it predicts next (the same prompt and seed), as prefetch does, and every
  // later generation waits for it first. Alive before the gate's first window, the thread looks like the
  // harness's own unless the harness's threads are those alive before the process's first generation.
  bool standing_thread = false;
};

// One switch: its manifest key and its field.
struct RedTeamSwitch {
  const char* key;
  bool RedTeamOptions::*field;
};

// Every switch by its manifest key ("redteam": {key: true}): one table for parsing and printing.
inline const std::vector<RedTeamSwitch>& switches() {
  static const std::vector<RedTeamSwitch> all = {{"off_leak", &RedTeamOptions::off_leak},
                                                 {"write_output_early", &RedTeamOptions::write_output_early},
                                                 {"sandbag", &RedTeamOptions::sandbag},
                                                 {"prefetch", &RedTeamOptions::prefetch},
                                                 {"replay_baseline", &RedTeamOptions::replay_baseline},
                                                 {"replay_baseline_cache", &RedTeamOptions::replay_baseline_cache},
                                                 {"inflate_counters", &RedTeamOptions::inflate_counters},
                                                 {"skip_warmup", &RedTeamOptions::skip_warmup},
                                                 {"sparse_skip_dense", &RedTeamOptions::sparse_skip_dense},
                                                 {"load_spike", &RedTeamOptions::load_spike},
                                                 {"text_cache", &RedTeamOptions::text_cache},
                                                 {"reverse_time", &RedTeamOptions::reverse_time},
                                                 {"fewer_steps", &RedTeamOptions::fewer_steps},
                                                 {"write_output_late", &RedTeamOptions::write_output_late},
                                                 {"standing_thread", &RedTeamOptions::standing_thread}};
  return all;
}

inline bool any_on(const RedTeamOptions& r) {
  for (const auto& s : switches())
    if (r.*(s.field)) return true;
  return false;
}

}  // namespace autooptim::redteam
