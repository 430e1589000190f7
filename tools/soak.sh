#!/usr/bin/env bash
# Hunt flaky notebook cells the way CI meets them: every notebook under nbval three times, two at a
# time, each run with another PYTHONHASHSEED, the third beside a CPU-bound process.
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
for seed in 1 2 3; do
  busy=""
  if [ "$seed" = 3 ]; then
    python3 -c "while True: pass" &
    busy=$!
  fi
  report=_build/soak/$stack-$seed.txt
  PYTHONHASHSEED=$seed "$pytest" -n 2 --dist loadfile -p no:cacheprovider \
    --nbval-lax --nbval-current-env --nbval-sanitize-with book/_nbval_sanitize.cfg \
    "$@" book >"$report" 2>&1 || status=1
  [ -n "$busy" ] && kill "$busy"
  echo "$stack PYTHONHASHSEED=$seed${busy:+ (beside a busy process)}: $(tail -n 1 "$report")"
done
exit $status
