"""An llm.c uint32 token shard (magic 20240801, version 7) of N random ids below V, seed 0: the
GPU benchmarks' data (their speed does not depend on the values).
usage: python3 bench/random_shard.py OUT N V"""
import random, struct, sys

path, n, V = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(0)
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240801, 7, n, *([0] * 253)))
    f.write(struct.pack("<%dI" % n, *[random.randrange(V) for _ in range(n)]))
