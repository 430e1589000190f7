#!/usr/bin/env bash
# Hunt flaky notebook cells the way CI meets them, and the checked outputs that load can change:
# every notebook under nbval three times, two at a time, each run with another PYTHONHASHSEED.
#
#   run 1: TensorFlow's thread pools as they come (as many threads as cores);
#   run 2: TensorFlow's intra-op and inter-op pools at 1 thread, beside a CPU-bound process;
#   run 3: the same at 4 threads, beside a CPU-bound process.
#
# The thread counts are set by TF_NUM_INTRAOP_THREADS and TF_NUM_INTEROP_THREADS (TensorFlow reads
# them when it starts; chapter 10's workers inherit them) and OMP_NUM_THREADS (oneDNN, PyTorch).
# TensorFlow splits a large sum or matrix product among its threads, so the order of a float32 sum
# follows the thread count, and a load-dependent figure checked with nbval-check-output fails
# run 2 or run 3.
#
#   tools/soak.sh .venv/bin/pytest [pytest args...]       # `make soak` (pinned stack)
#   tools/soak.sh .venv-colab/bin/pytest --import-mode=importlib   # `make soak-colab`
#
# Prints one summary line per run and leaves each run's report in _build/soak/<stack>-<seed>.txt;
# exits 1 if any run failed.
set -uo pipefail
pytest=${1:?usage: tools/soak.sh PYTEST [ARGS...]}
shift
stack=$(basename "$(dirname "$(dirname "$pytest")")")
stack=${stack#.}
mkdir -p _build/soak
status=0
# seed:threads ("-": TensorFlow's default pools)
for run in 1:- 2:1 3:4; do
  seed=${run%%:*}
  threads=${run#*:}
  settings=(PYTHONHASHSEED="$seed")
  busy=""
  if [ "$threads" != - ]; then
    settings+=(TF_NUM_INTRAOP_THREADS="$threads" TF_NUM_INTEROP_THREADS="$threads")
    settings+=(OMP_NUM_THREADS="$threads")
    python3 -c "while True: pass" &
    busy=$!
  fi
  report=_build/soak/$stack-$seed.txt
  env "${settings[@]}" "$pytest" -n 2 --dist loadfile -p no:cacheprovider \
    --nbval-lax --nbval-current-env --nbval-sanitize-with book/_nbval_sanitize.cfg \
    "$@" book >"$report" 2>&1 || status=1
  [ -n "$busy" ] && kill "$busy"
  said="$stack PYTHONHASHSEED=$seed"
  [ "$threads" != - ] && said+=", thread pools of $threads, beside a busy process"
  echo "$said: $(tail -n 1 "$report")"
done
exit $status
