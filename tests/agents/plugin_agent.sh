#!/bin/sh
# plugin_agent.sh BRIEF SOURCE_DIR: a scripted agent that writes code (issue 42), standing in for a model. In its
# sandbox it writes a technique plugin (here: the repository's step_reuse.cpp, copied into its workspace), builds it
# with `autooptim agent build`, hands it to the run with `autooptim agent plugin`, measures a manifest of it with a
# trial and proposes it. Then two hostile turns: a link handed over as a plugin, and a file that is not a plugin.
# Its lines: PLUGIN <sha256>, TRIAL <json>, PROPOSED, then BLOCKED ... for each refused turn (LEAKED if one passed).
set -u
src=$2
cp "$src/tests/agents/plugins/step_reuse.cpp" step_reuse.cpp
if ! autooptim agent build step_reuse.cpp --out step_reuse.so; then
  echo "BUILD-FAILED"
  exit 0
fi
if ! out=$(autooptim agent plugin step_reuse.so); then
  echo "PLUGIN-REFUSED $out"
  exit 0
fi
echo "PLUGIN $(printf '%s' "$out" | tr -d ' \n' | sed -n 's/.*"plugin":"\([0-9a-f]*\)".*/\1/p')"
printf '{"flags": {"step_reuse": {"enabled": true, "interval": 5}}}\n' >reuse5.json
if ! out=$(autooptim agent trial --manifest reuse5.json --prompts 1); then
  echo "TRIAL-FAILED $out"
  exit 0
fi
echo "TRIAL $(printf '%s' "$out" | tr -d ' \n')"
autooptim agent propose --manifest reuse5.json --why "step_reuse at interval 5: $(printf '%s' "$out" | tr -d ' \n')" &&
  echo "PROPOSED"
# Hostile: a link to a file outside the workspace, named as a plugin; then a file that is not one.
ln -s /etc/hostname link.so
if autooptim agent plugin link.so >/dev/null 2>&1; then echo "LEAKED plugin-link"; else echo "BLOCKED plugin-link"; fi
printf 'not a shared object\n' >fake.so
if autooptim agent plugin fake.so >/dev/null 2>&1; then echo "LEAKED plugin-fake"; else echo "BLOCKED plugin-fake"; fi
exit 0
