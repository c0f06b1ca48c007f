# Sourced by the GPU quality scripts (quality.sh, fidelity.sh): the reduced configuration they gate and
# generate at, so that a clip of TI2V-5B takes seconds (official_config fails by design there).
R_FRAMES=33 R_HEIGHT=480 R_WIDTH=832 R_STEPS=20
# The gate's options that pin the baseline at it.
REDUCED_GATE_ARGS=(--frames $R_FRAMES --height $R_HEIGHT --width $R_WIDTH --steps $R_STEPS)
reduce_manifest() {  # SRC DST: the manifest SRC at the reduced configuration (a sparse one's 4 dense steps)
  python3 - "$1" "$2" $R_FRAMES $R_HEIGHT $R_WIDTH $R_STEPS <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["config"].update(dict(zip(["frames", "height", "width", "steps"], map(int, sys.argv[3:7]))))
if m.get("flags", {}).get("sparse", {}).get("dense_steps"):
    m["flags"]["sparse"]["dense_steps"] = 4
json.dump(m, open(sys.argv[2], "w"), indent=2)
PY
}
