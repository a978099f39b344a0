/**
 * Part of `npm run build`, after tsc: records in dist/build-info.json what the installed package cannot
 * compute itself (it ships no TypeScript sources): the worker build id derived from this checkout's
 * workflow, contract and core sources (workers/versioning.ts). Its presence also marks dist/ as complete.
 */
import { writeFileSync } from 'node:fs';
import { BUILD_INFO_FILE, defaultBuildId, type BuildInfo } from '../workers/versioning';

const info: BuildInfo = { buildId: defaultBuildId() };
writeFileSync(BUILD_INFO_FILE, `${JSON.stringify(info, null, 2)}\n`);
process.stdout.write(`${BUILD_INFO_FILE}: build id ${info.buildId}\n`);
