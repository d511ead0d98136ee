#!/usr/bin/env bash
# The README's main job end to end (tools/run-demo.sh, label slow: about two minutes): the model
# fine-tuned on 4096-token windows answers the recall questions whose facts lie 2048 .. 2520
# tokens back at least 3x chance (1/16) and better than its twin fine-tuned on 64-token windows;
# the reports and the SVG pictures parse. demo_quick.sh runs a smaller size of it in CI.
source "$(dirname "$0")/lib.sh"
T=${DEMO_T:-4096}
if ! (cd "$SRC" && OUT_DIR="$TMP/demo" DEMO_T=$T DEMO_STEPS=${DEMO_STEPS:-600} \
    bash tools/run-demo.sh "$UPIPE") >"$TMP/demo.out" 2>&1; then
  bad "tools/run-demo.sh failed"; tail -30 "$TMP/demo.out"; finish; exit 1
fi
sed -n '/^== 3/,$p' "$TMP/demo.out"
# The farthest distance bucket a window holds: [T/2, T) (facts reach 2520 tokens back).
LO=$((T / 2))
python3 - "$TMP/demo" "$LO" >"$TMP/py.out" 2>&1 <<'PY' && ok "$(cat "$TMP/py.out")" || { bad "recall"; cat "$TMP/py.out"; }
import json, sys, xml.etree.ElementTree as ET
d, lo = sys.argv[1], int(sys.argv[2])
def far(name):
    r = json.load(open(f"{d}/eval-{name}.json"))["recall"]
    b = [x for x in r["by_distance"] if x["lo"] >= lo and x["n"] > 0]
    n = sum(x["n"] for x in b)
    assert n >= 50, f"{name}: only {n} questions at distance >= {lo}"
    return sum(x["accuracy"] * x["n"] for x in b) / n, n
(acc_l, n), (acc_t, _) = far("long"), far("twin")
chance = 1 / 16
assert acc_l >= 3 * chance, f"long windows: accuracy {acc_l:.3f} at distance >= {lo} is under 3x chance"
assert acc_l > acc_t, f"long windows {acc_l:.3f} not above the short twin {acc_t:.3f}"
for f in ["recall-long", "recall-twin", "loss-long", "loss-twin", "train-long"]:
    assert ET.parse(f"{d}/{f}.svg").getroot().tag.endswith("svg"), f
print(f"distance >= {lo} ({n} questions): long windows {acc_l:.3f} ({acc_l / chance:.1f}x chance), "
      f"short twin {acc_t:.3f}; 5 SVGs parse")
PY
finish
