import { randomBytes } from 'node:crypto';
import { open, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { WavegateError } from '../../core/errors';
import { parseWitnessState, witnessStateFileName, witnessStateText, type WitnessState } from '../../core/witness';

/**
 * The witness's durable state (docs/formats.md, "The witness's state directory"): one file per origin,
 * `<state dir>/<hex SHA-256 of the origin>.json`, holding the largest tree cosigned for it (core/witness.ts). A file
 * is replaced whole (a new file beside it, written, fsynced, renamed over it, the directory fsynced) before the
 * cosignature is answered: once a witness has said "I saw size n with root r", no crash makes it forget.
 *
 * Asynchronous on purpose: one origin's fsync does not hold the others' requests. So two requests of one origin
 * must not interleave between reading the state and writing it (both would decide from the same old state, and
 * a fork could get a cosignature beside the tree it forks): OriginQueue runs them one after another.
 */
export class WitnessStore {
  constructor(private readonly dir: string) {}

  /** The last cosigned tree of `origin`; undefined only when its file does not exist (INVALID_STATE when damaged). */
  async read(origin: string): Promise<WitnessState | undefined> {
    const path = join(this.dir, witnessStateFileName(origin));
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new WavegateError(
        'INVALID_STATE',
        `${path}: cannot read the witness state of ${origin} (${(err as NodeJS.ErrnoException).code ?? String(err)}); not cosigning`,
        { origin },
      );
    }
    return parseWitnessState(text, path, origin);
  }

  /** Replace `state.origin`'s file, durably, before the caller answers. */
  async write(state: WitnessState, at: Date): Promise<void> {
    const path = join(this.dir, witnessStateFileName(state.origin));
    const temp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    try {
      const file = await open(temp, 'wx', 0o600);
      try {
        await file.writeFile(witnessStateText(state, at));
        await file.sync();
      } finally {
        await file.close();
      }
      await rename(temp, path);
    } catch (err) {
      await rm(temp, { force: true });
      throw err;
    }
    // The rename is an entry of the directory: synced too, or a power cut could bring the old file back.
    const dir = await open(this.dir, 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  }
}

/** Runs the tasks of one key one after another (in the order asked), those of different keys side by side. */
export class OriginQueue {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const before = this.tails.get(key) ?? Promise.resolve();
    const result = before.then(task);
    const tail = result.catch(() => {});
    this.tails.set(key, tail);
    // The last task of a key forgets it: the map holds only the origins with a request in flight.
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }
}
