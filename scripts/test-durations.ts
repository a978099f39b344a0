/**
 * Refresh test/durations.json (the order test/support/sequencer.mts runs files in) from the JSON report
 * every vitest run leaves (vitest.config.mts):
 *
 *   npx tsx scripts/test-durations.ts test-output/vitest*.json
 *
 * (`npm test` leaves three: vitest.json, vitest-alone.json and vitest-exclusive.json, scripts/test.sh.)
 *
 * Durations are rounded to 100 ms; files the report does not name keep their recorded duration, and
 * files that no longer exist are dropped.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { DURATIONS_FILE, readDurations } from '../test/support/test-durations.mjs';

interface JsonReport {
  testResults?: Array<{ name?: unknown; startTime?: unknown; endTime?: unknown }>;
}

const root = join(__dirname, '..');
const reportPaths = process.argv.slice(2);
if (reportPaths.length === 0) {
  console.error('usage: npx tsx scripts/test-durations.ts <vitest JSON report>...');
  process.exit(2);
}
const durations = readDurations(root);
let updated = 0;
for (const reportPath of reportPaths) {
  let report: JsonReport;
  try {
    report = JSON.parse(readFileSync(reportPath, 'utf8')) as JsonReport;
  } catch (err) {
    console.error(`report: cannot read ${reportPath} as JSON: ${(err as Error).message}`);
    process.exit(2);
  }
  // Paths in the report are absolute, under the checkout that ran it (`<checkout>/test-output/vitest.json`):
  // relative to that checkout, so a CI clone's report refreshes this one.
  const reportRoot = dirname(dirname(resolve(reportPath)));
  for (const r of report.testResults ?? []) {
    if (typeof r.name !== 'string' || typeof r.startTime !== 'number' || typeof r.endTime !== 'number') continue;
    durations.set(relative(reportRoot, r.name), Math.round((r.endTime - r.startTime) / 100) * 100);
    updated += 1;
  }
}
const kept = [...durations].filter(([file]) => existsSync(join(root, file))).sort(([a], [b]) => (a < b ? -1 : 1));
writeFileSync(join(root, DURATIONS_FILE), `${JSON.stringify(Object.fromEntries(kept), null, 1)}\n`);
console.log(`${DURATIONS_FILE}: ${updated} file(s) from ${reportPaths.join(', ')}, ${kept.length} recorded`);
