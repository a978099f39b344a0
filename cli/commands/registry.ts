import { userInfo } from 'node:os';
import type { Command } from 'commander';
import { resolveConnectionSettings, type TemporalFlags } from '../../workers/connection';
import { connectClient, withTemporalOptions } from '../client';
import { readDocument } from '../../intake/files';
import { listRevisions, registerEnvelope } from '../../clients/registry';
import { checkWithProfileTrust, envelopeProfile, syncNotes, syncRegistryTrust } from '../registry-client';
import { profileDir } from '../../intake/profile-dir';
import { profilesOptionHelp, resolveProfilesRoot } from '../../intake/profiles-root';
import { action, EXIT_OK } from '../run';

/**
 * The revision registry: `register` puts a signed envelope into its profile's
 * registry workflow `registry:<profile>`; `revisions list` shows what is registered.
 */

export function register(program: Command): void {
  withTemporalOptions(
    program
      .command('register <envelope>')
      .description(
        "Register a signed envelope (from sign/cosign) into its profile's registry; exit 2 with the reason code when refused",
      )
      .requiredOption('--trust <file>', 'trust file (threshold + pins) the registry is created with on first use')
      .option(
        '--profiles <dir>',
        `${profilesOptionHelp()}; the envelope is checked first against its profile's trust root and revocation list there, and the registry is offered the roots and list it lacks`,
      )
      .option('--by <name>', 'who registers it (default: the login name)')
      .option('--json', 'print the outcome as JSON'),
  ).action(
    action(
      async (path: string, opts: TemporalFlags & { trust: string; profiles?: string; by?: string; json?: boolean }) => {
        const envelope = readDocument(path, 'json');
        const trustDoc = readDocument(opts.trust);
        const profile = envelopeProfile(envelope, path);
        // Checked here first against the profile's newest trust root and list: refused before anything is sent.
        const layout = profileDir(resolveProfilesRoot({ flag: opts.profiles }).dir, profile);
        const checked = checkWithProfileTrust(envelope, path, layout);
        if (!checked)
          process.stderr.write(
            `wavegate: note: no ${layout.trustFile}: the envelope is checked by the registry's pins only (no trust root or revocation list here)\n`,
          );
        const settings = resolveConnectionSettings(opts);
        const client = await connectClient(settings);
        try {
          // The registry walks to the roots and list it lacks itself, or refuses them and keeps its pins (said below).
          const sync = checked
            ? await syncRegistryTrust(client, { layout, start: { trustDoc, taskQueue: settings.taskQueue } })
            : undefined;
          if (sync) for (const line of syncNotes(profile, sync)) process.stderr.write(`wavegate: ${line}\n`);
          const result = await registerEnvelope(client, {
            profile,
            envelope,
            trustDoc,
            by: opts.by ?? userInfo().username,
            taskQueue: settings.taskQueue,
            ...(sync?.trustHeld ? { trustHeld: sync.trustHeld } : {}),
          });
          if (opts.json) process.stdout.write(`${JSON.stringify({ profile, ...result })}\n`);
          else
            process.stdout.write(
              `${result.outcome} ${profile} r${result.revision} (body sha256 ${result.bodyDigest}) in registry:${profile}\n`,
            );
          if (result.registryTrustDiffers) {
            process.stderr.write(
              `wavegate: note: registry:${profile} was created with other pins than ${opts.trust}\n`,
            );
          }
          return EXIT_OK;
        } finally {
          await client.connection.close();
        }
      },
    ),
  );

  const revisions = program.command('revisions').description('The registered revisions of a profile');
  withTemporalOptions(
    revisions
      .command('list')
      .description('List the registered revisions of a profile, oldest first')
      .requiredOption('--profile <name>', 'profile')
      .option('--json', 'print the list as JSON'),
  ).action(
    action(async (opts: TemporalFlags & { profile: string; json?: boolean }) => {
      const client = await connectClient(resolveConnectionSettings(opts));
      try {
        const list = await listRevisions(client, opts.profile);
        if (opts.json) {
          process.stdout.write(`${JSON.stringify(list)}\n`);
          return EXIT_OK;
        }
        if (list.length === 0) {
          process.stdout.write(`registry:${opts.profile} holds no revisions\n`);
          return EXIT_OK;
        }
        process.stdout.write(
          `${'REV'.padEnd(5)}${'RISK'.padEnd(7)}${'PROVABLE'.padEnd(10)}${'EXPIRES'.padEnd(26)}${'REGISTERED'.padEnd(26)}${'BY'.padEnd(14)}SIGNERS  BODY SHA256\n`,
        );
        for (const r of list) {
          process.stdout.write(
            `${String(r.revision).padEnd(5)}${r.risk.padEnd(7)}${(r.provable ? 'yes' : 'no').padEnd(10)}${(r.expiresAt ?? '-').padEnd(26)}${r.registeredAt.padEnd(26)}${r.by.padEnd(14)}${String(r.signers.length).padEnd(9)}${r.bodyDigest.slice(0, 16)}…${r.revoked ? `  REVOKED: ${r.revoked}` : ''}\n`,
          );
        }
        return EXIT_OK;
      } finally {
        await client.connection.close();
      }
    }),
  );
}
