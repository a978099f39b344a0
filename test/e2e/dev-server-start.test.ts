import { join } from 'node:path';
import { mkdirSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { startDevServer } from '../../workers/dev-server';
import { freePort } from '../../sim/ports';
import { scratchDir } from '../support/harness';

const scratch = scratchDir('dev-server-start');
afterAll(() => scratch.cleanup());

describe('startDevServer', () => {
  it('a server that exits during start-up is UNAVAILABLE naming the cause its log gives, not only the log', async () => {
    // Its database path is a directory: SQLite cannot open it, and the server exits at once.
    const dbFile = join(scratch.dir, 'a-directory');
    mkdirSync(dbFile);
    const started = startDevServer({
      dbFile,
      logFile: join(scratch.dir, 'temporal.log'),
      port: await freePort(),
      uiPort: await freePort(),
    });
    await expect(started).rejects.toMatchObject({
      code: 'UNAVAILABLE',
      message: expect.stringMatching(
        /exited during start-up \(.*unable to open database file.*\); see .*temporal\.log$/,
      ),
    });
  });
});
