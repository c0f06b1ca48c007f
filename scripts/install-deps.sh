#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the tests need, only those that are missing.
# Safe to run again; needs root (or sudo) only when something is missing.
set -euo pipefail
pkgs=(cmake ninja-build g++ make pkg-config
      libtorch-dev libopenblas0-pthread
      libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libgtest-dev
      libopencv-core-dev libopencv-imgproc-dev libopencv-video-dev libopencv-videoio-dev
      libopencv-imgcodecs-dev
      libsentencepiece-dev
      clang libclang-rt-14-dev   # the libFuzzer targets (tests/fuzz/); the build itself uses g++
      clang-format               # the format check (tests/architecture/format_check.sh, .clang-format)
      slurm-wlm slurm-client munge  # the single-node Slurm of tests/slurm/ (cluster.sh) and `run --launcher slurm`
      bubblewrap)  # the agents' sandbox (docs/agents.md, src/base/sandbox.h)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# Without systemd the packages' post-install scripts cannot start slurmctld/slurmd/munged (tests/slurm/cluster.sh
# starts its own); policy-rc.d keeps them from trying, and is removed again if this script put it there.
policy=/usr/sbin/policy-rc.d; own_policy=0
if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null; $sudo chmod +x "$policy"; own_policy=1; fi
trap 'if [ "$own_policy" = 1 ]; then $sudo rm -f "$policy"; fi' EXIT
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
