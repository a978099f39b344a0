#!/bin/sh
# `npm test` after the lint: the typecheck and the tests at once, failing if either fails
# (docs/development.md, "Test suite time").
#
# The typecheck (`tsc --noEmit -p .`, about 30 s of CPU on one core) runs beside the tests at the lowest priority:
# it takes only CPU the tests leave idle. Its output is printed after the tests', so the two never interleave.
#
# The files that must run with nothing beside them (vitest.config.mts, RUN_ALONE) ran after all the others, one at
# a time, while most of a core idled (a Chromium page, a timer-bound check). They now run as a second vitest beside
# the shared files, which run at the lowest priority: the scheduler gives the alone files the CPU they ask for at
# once (a niced process gets about 1.5% of a core against one at the default priority), and the shared files
# take what is left. `wavegate dev` on the fixed ports 7233/8233 (project `exclusive`) still runs with nothing
# beside it but the typecheck, first. The build both runs use is made once, here (test/support/run-setup.ts).
#
# Arguments go to one vitest run, as before (`npm test -- <file>`).
set -u
cd "$(dirname "$0")/.."

out=$(mktemp)
alone_out=$(mktemp)
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/wavegate-test-run-XXXXXX")
trap 'rm -rf "$out" "$alone_out" "$run_dir"' EXIT
nice -n 19 node_modules/.bin/tsc --noEmit -p . >"$out" 2>&1 &
typecheck=$!

if [ "$#" -gt 0 ]; then
  node_modules/.bin/vitest run "$@"
  tests=$?
else
  # What global-setup.ts would do in each run, once: its variables tell both runs it is done.
  from=$(node_modules/.bin/tsx test/support/run-setup.ts) || exit 1
  if [ "$from" = dist ]; then
    export WAVEGATE_RUN_FROM=dist WAVEGATE_TEST_FRESH_DIST=1
  fi
  export WAVEGATE_TEST_RUN_DIR="$run_dir" WAVEGATE_CODE_CACHE="$run_dir/code-cache"

  WAVEGATE_TEST_REPORT=test-output/vitest-exclusive.json node_modules/.bin/vitest run --project exclusive
  exclusive=$?
  WAVEGATE_TEST_REPORT=test-output/vitest-alone.json node_modules/.bin/vitest run --project alone >"$alone_out" 2>&1 &
  alone_pid=$!
  nice -n 19 node_modules/.bin/vitest run --project shared --project unit --project unit-isolated
  shared=$?
  wait "$alone_pid"
  alone=$?
  echo "== the files run alone (beside the others, at the default priority):"
  cat "$alone_out"
  tests=0
  [ "$exclusive" -eq 0 ] && [ "$shared" -eq 0 ] && [ "$alone" -eq 0 ] || tests=1
fi

wait "$typecheck"
types=$?
if [ "$types" -ne 0 ]; then
  cat "$out"
  echo "npm test: the typecheck failed (tsc --noEmit -p .: exit $types)" >&2
fi
[ "$tests" -eq 0 ] && [ "$types" -eq 0 ]
