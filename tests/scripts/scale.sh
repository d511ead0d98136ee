#!/usr/bin/env bash
# Larger-scale invariance (label slow: `make test-all`): the engine benchmark model at T=2048, one
# rank plain against 4 ranks with every technique at once: one sequence over 4 context-parallel
# ranks (so both runs see the same tokens), UPipe, FSDP, offload and tiles.
source "$(dirname "$0")/lib.sh"
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 10000 --distance 512 >/dev/null || bad "data recall"
mkdir -p "$TMP/store"
B="--config $SRC/configs/bench.json --data $TMP/d.bin --seq-len 2048 --seed 3"
# Same reasoning as the other invariance tests (reassociation of fp32 sums over up to T*C ~ 1e6
# terms here, measured <= 3e-6 of a tensor's scale); 1e-5.
GRAD_RTOL=1e-5
LOSS_RTOL=1e-6
run_case plain 1 $B
run_case all 4 $B --fsdp --upipe-heads 4 --offload "$TMP/store" --tile-mlp --tile-loss && compare all plain
finish
