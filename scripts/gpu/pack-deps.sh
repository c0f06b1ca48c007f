#!/usr/bin/env bash
# Packs .device-deps (made by ../shared/tools/device-deps.sh) into .device-deps.txz, about a quarter of its
# size: the working tree plus what a device call carries must stay under 64 MiB, and the golden vectors of
# two models leave no room for the unpacked libraries. Carry ".device-deps.txz"; scripts/gpu/check.sh and
# build.sh unpack it on the device. Run here, from the repo root, after device-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f .device-deps/env.sh ] || { echo "pack-deps.sh: .device-deps missing: run ../shared/tools/device-deps.sh first" >&2; exit 2; }
tar cf - .device-deps | xz -6 -T0 > .device-deps.txz.tmp
mv .device-deps.txz.tmp .device-deps.txz
ls -l .device-deps.txz
