#!/bin/sh
# Runs a program on the core numbered like its tmx rank: tmxrun sets
# TMX_RANK, so under `tmxrun -n 2 bench/pin_rank.sh PROG ...` rank 0 runs on
# core 0 and rank 1 on core 1 (taskset alone on tmxrun would let the
# scheduler put both ranks on one core now and then).
: "${TMX_RANK:?pin_rank.sh: TMX_RANK is not set (run it under tmxrun)}"
exec taskset -c "$TMX_RANK" "$@"
