import { randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { agentKeyPin } from '../core/agent-auth';
import { makeProof, type IdentityRotationNews, type RotationProof } from '../core/agent-rotation';
import { keyPairFromSeed, secretKeyFile, type KeyPair } from '../core/signing';
import { writeFileAtomic } from '../intake/files';
import { loadIdentity } from './identity';
import { syncDir } from './receipts';

/**
 * The agent's half of an identity key rotation (docs/operations.md, "Rotating an agent's identity key"). Told by
 * its gateway that a rotation of its key is published (`rotation` in a sync answer), it makes the new key in its
 * state directory (`identity-<id>.next.key`, 0600, written whole and renamed; never sent); from the activate
 * instant each sync carries the proof (core/agent-rotation.ts). Once the gateway answers the rotation `active`
 * with that key, the agent signs with it: the old key is kept aside (`identity-<id>.old.key`) and the new one
 * written over the `--key` file, so a restart signs with the new key too. Once the gateway answers `retired`,
 * the old key's file is deleted. The KeyPair the agent signs with (requests and receipts) is changed in place.
 */
export interface IdentityRotation {
  /** The proof the next sync carries, or none. */
  proof(now: number): RotationProof | undefined;
  /** Take the answer's news: make the new key, switch to it, or delete the old one. */
  take(news: IdentityRotationNews | undefined, now: number): void;
}

export function identityRotation(opts: {
  stateDir: string;
  /** The `--key` file: replaced by the new key once the gateway holds its proof. */
  keyFile: string;
  deviceId: string;
  /** The pair the agent signs with; replaced in place on the switch. */
  key: KeyPair;
  log: (line: string) => void;
}): IdentityRotation {
  const nextFile = (id: string) => join(opts.stateDir, `identity-${id}.next.key`);
  const oldFile = (id: string) => join(opts.stateDir, `identity-${id}.old.key`);
  let pending: { news: IdentityRotationNews; old: KeyPair; next: KeyPair } | undefined;
  const write = (path: string, pair: KeyPair) => {
    writeFileAtomic(path, `${JSON.stringify(secretKeyFile(pair), null, 2)}\n`, 0o600);
    syncDir(opts.stateDir);
  };
  const current = () => agentKeyPin(opts.key.publicKey);

  function prepare(news: IdentityRotationNews): void {
    if (pending?.news.id === news.id) {
      pending.news = news;
      return;
    }
    const path = nextFile(news.id);
    // Made once: a restart before the proof was taken proves the same key.
    const next = existsSync(path) ? loadIdentity(path) : keyPairFromSeed(randomBytes(32));
    if (!existsSync(path)) {
      write(path, next);
      opts.log(`rotation ${news.id}: a new identity key made (${path}); proven to the gateway from ${news.activate}`);
    }
    pending = { news, old: { ...opts.key }, next };
  }

  function switchTo(news: IdentityRotationNews): void {
    if (!pending || news.new !== agentKeyPin(pending.next.publicKey)) return;
    // The old key aside first, then the new one over --key: a crash between leaves both on disk, never neither.
    write(oldFile(news.id), pending.old);
    write(opts.keyFile, pending.next);
    rmSync(nextFile(news.id), { force: true });
    Object.assign(opts.key, pending.next);
    opts.log(`rotation ${news.id}: the gateway holds the proof; signing with the new identity key ${news.new}`);
    pending = undefined;
  }

  return {
    proof(now) {
      if (!pending || now < Date.parse(pending.news.activate)) return undefined;
      return makeProof(pending.news.id, opts.deviceId, pending.old, pending.next);
    },
    take(news) {
      if (!news) return;
      if (news.state === 'published') return prepare(news);
      if (news.new !== current()) {
        // The gateway holds our proof but we have not switched yet (the acknowledgement was lost): switch now.
        if (!pending && existsSync(nextFile(news.id))) prepare({ ...news, state: 'published' });
        switchTo(news);
      }
      if (news.state === 'retired' && news.new === current() && existsSync(oldFile(news.id))) {
        rmSync(oldFile(news.id), { force: true });
        syncDir(opts.stateDir);
        opts.log(`rotation ${news.id}: retired; the old identity key deleted`);
      }
    },
  };
}
