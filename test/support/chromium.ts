import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

/**
 * The system's headless Chromium (Debian's `chromium`, installed by CI) with a profile of its own under
 * `dir`: nothing from another run or the user's browser, no network beyond what the page asks for.
 */
export function launchChromium(dir: string, viewport: { width: number; height: number }): Promise<BrowserContext> {
  return chromium.launchPersistentContext(join(dir, 'chromium-profile'), {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
