#!/usr/bin/env bash
# Technique plugins (issue 42, src/runtime/plugin.h), end to end with the real compiler and the embedded model:
#  - `agent build` compiles tests/agents/plugins/probe_linear.cpp as the binary was built;
#  - `techniques --plugin` lists its technique, pinned by the plugin's sha256;
#  - a manifest turning it on without pinning the plugin is refused, naming the pin; pinned, `generate --plugin`
#    runs it on wan22-tiny: its counter shows it engaged and the clip is the baseline's bit for bit;
#  - without --plugin the pinned manifest is refused (the plugin is not loaded);
#  - a plugin whose override takes a built-in technique's name (takeover.cpp), a shared object that is not a
#    plugin, a missing file and a source that does not compile each end in one message and a non-zero exit.
# Usage: test_plugins.sh AUTOOPTIM SOURCE_DIR
set -euo pipefail
bin=$(readlink -f "$1")
src=$(readlink -f "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_error() {  # expect_error PATTERN CMD...: a non-zero exit whose output holds PATTERN
  local pattern=$1; shift
  if "$@" >"$tmp/err" 2>&1; then fail "succeeded: $*"; fi
  grep -q -- "$pattern" "$tmp/err" || fail "no '$pattern' in: $(cat "$tmp/err")"
}

"$bin" agent build "$src/tests/agents/plugins/probe_linear.cpp" --out "$tmp/probe.so" >"$tmp/build.log" 2>&1 ||
  fail "agent build: $(tail -20 "$tmp/build.log")"
sha=$(sha256sum "$tmp/probe.so" | cut -d' ' -f1)

"$bin" techniques --plugin "$tmp/probe.so" --json >"$tmp/techniques.json"
python3 - "$tmp/techniques.json" "$sha" <<'PY'
import json, sys
ts = {t["name"]: t for t in json.load(open(sys.argv[1]))["techniques"]}
t = ts.get("probe_linear") or sys.exit("probe_linear not listed")
assert t["plugin"] == sys.argv[2], t["plugin"]
assert t["family"] == "kernel" and t["lossless"] is True, t
assert list(t["flags"]) == ["probe_linear"], t["flags"]
assert all("plugin" not in u for n, u in ts.items() if n != "probe_linear")
PY

python3 - "$src/manifests/wan22-tiny/baseline.json" "$tmp" "$sha" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["config"]["steps"] = 2
json.dump(m, open(sys.argv[2] + "/baseline.json", "w"))
m.update({"id": "wan22-tiny/kernel/probe", "kind": "patch", "family": "kernel", "base": m["id"], "lossless": True})
m["flags"]["probe_linear"] = True
json.dump(m, open(sys.argv[2] + "/unpinned.json", "w"))
m["plugin"] = sys.argv[3]
json.dump(m, open(sys.argv[2] + "/probe.json", "w"))
PY
prompt="a red circle quickly moves left across a striped background"
expect_error "must pin" "$bin" generate --plugin "$tmp/probe.so" --manifest "$tmp/unpinned.json" --prompt "$prompt" \
  --json "$tmp/x.json"
expect_error "is not loaded" "$bin" generate --manifest "$tmp/probe.json" --prompt "$prompt" --json "$tmp/x.json"
"$bin" generate --manifest "$tmp/baseline.json" --prompt "$prompt" --json "$tmp/base.json" >/dev/null 2>&1 ||
  fail "the baseline did not generate"
"$bin" generate --plugin "$tmp/probe.so" --manifest "$tmp/probe.json" --prompt "$prompt" --json "$tmp/probe-run.json" \
  >"$tmp/gen.log" 2>&1 || fail "generate with the plugin: $(tail -5 "$tmp/gen.log")"
python3 - "$tmp/base.json" "$tmp/probe-run.json" <<'PY'
import json, sys
base, probe = (json.load(open(p)) for p in sys.argv[1:])
calls = probe["runs"][0]["counters"].get("kernel.probe_linear.calls", 0)
assert calls > 0, "probe_linear did not engage"
assert probe["frames_sha256"] == base["frames_sha256"], "the plugin's clip is not the baseline's"
assert probe["manifest_hash"] != base["manifest_hash"]
print("probe_linear: %d linear calls, clip bit-identical to the baseline's" % calls)
PY

"$bin" agent build "$src/tests/agents/plugins/takeover.cpp" --out "$tmp/takeover.so" >/dev/null 2>&1 ||
  fail "agent build of takeover.cpp"
expect_error "registered for 'fp8', which is not a technique of this plugin" \
  "$bin" techniques --plugin "$tmp/takeover.so"
spm=$(dirname "$bin")/libautooptim_spm.so
[ -f "$spm" ] && expect_error "not an autooptim plugin" "$bin" techniques --plugin "$spm"
expect_error "no such plugin file" "$bin" techniques --plugin "$tmp/missing.so"
printf 'this is not C++\n' >"$tmp/broken.cpp"
expect_error "the compiler failed" "$bin" agent build "$tmp/broken.cpp" --out "$tmp/broken.so"
[ ! -e "$tmp/broken.so" ] || fail "a failed build left a plugin file"
echo "plugins: ok"
