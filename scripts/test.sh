#!/bin/sh
# `npm test` after the lint: the typecheck and the tests at once, failing if either fails.
#
# The typecheck (`tsc --noEmit -p .`, about 30 s of CPU on one core) ran before the tests, while the second
# core idled; and the tests' own set-up (test/support/global-setup.ts: the compiled dist/ and the workflow and
# CLI bundles, about 20 s) is one core's work too. Beside them, at the lowest priority, it takes only CPU the
# tests leave idle: CI's wall time falls by about the typecheck's. Its output is kept and printed after the
# tests', so the two never interleave. Arguments go to vitest (`npm test -- <file>`).
set -u
cd "$(dirname "$0")/.."

out=$(mktemp)
trap 'rm -f "$out"' EXIT
nice -n 19 node_modules/.bin/tsc --noEmit -p . >"$out" 2>&1 &
typecheck=$!

node_modules/.bin/vitest run "$@"
tests=$?

wait "$typecheck"
types=$?
if [ "$types" -ne 0 ]; then
  cat "$out"
  echo "npm test: the typecheck failed (tsc --noEmit -p .: exit $types)" >&2
fi
[ "$tests" -eq 0 ] && [ "$types" -eq 0 ]
