import type { IncomingMessage, ServerResponse } from 'node:http';
import type { parseDeviceQuery } from '../../core/board';
import { WavegateError } from '../../core/errors';
import { HttpRefusal } from '../../http/answer';
import { firstLineOf } from '../client';
import { liveFingerprint, rolloutView, type BoardSources } from './data';
import { BOARD_LIMITS } from './limits';
import { withinTemporal } from './temporal';

export interface LiveStreamOptions {
  sources: BoardSources;
  log: (line: string) => void;
  pollMs: number;
  maxStreams: number;
  /** A live stream ends after this long (the page's EventSource opens another): none is held for ever. */
  streamMs: number;
  /** A stream's bytes waiting for a client that does not read them: past this the stream is dropped. */
  streamBufferBytes: number;
}

type DeviceQuery = ReturnType<typeof parseDeviceQuery>;

/**
 * The board's live updates, as server-sent events: the rollout's view each time its status changes,
 * until it has closed. The slot is taken before anything is awaited (the cap holds however many arrive
 * at once); a stream ends after streamMs or once a client leaves more than streamBufferBytes unread.
 */
export class LiveStreams {
  private readonly open = new Set<ServerResponse>();
  private slots = 0;
  private closing = false;

  constructor(private readonly opts: LiveStreamOptions) {}

  async stream(req: IncomingMessage, res: ServerResponse, id: string, query: DeviceQuery): Promise<void> {
    if (this.slots >= this.opts.maxStreams)
      throw new HttpRefusal(
        503,
        'BUSY',
        `${this.opts.maxStreams} live streams are open, the limit; close a board tab or try again`,
      );
    this.slots++;
    try {
      await this.streamView(req, res, id, query);
    } finally {
      this.slots--;
    }
  }

  /** Every stream ended now (the board is closing): none polls again. */
  closeAll(): void {
    this.closing = true;
    for (const res of this.open) res.end();
  }

  private async streamView(req: IncomingMessage, res: ServerResponse, id: string, query: DeviceQuery): Promise<void> {
    const { sources, log, pollMs, streamMs, streamBufferBytes } = this.opts;
    const connection = sources.client.connection;
    const viewOf = () => withinTemporal(connection, `the view of ${id}`, () => rolloutView(sources, id, query));
    // Unknown ids are refused as JSON before the stream starts.
    let view = await viewOf();
    const opened = Date.now();
    this.open.add(res);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    req.socket.setTimeout(0);
    let ended = false;
    const end = () => {
      ended = true;
      this.open.delete(res);
    };
    req.on('close', end);
    // What is still queued from earlier frames when the next is written: the kernel's socket buffers (a
    // few MiB) are full, and the client is not reading. (Just after a write its own frame is queued too.)
    const write = (text: string) => {
      if (ended) return;
      if (res.writableLength > streamBufferBytes) {
        log(
          `board: a live stream of ${id} dropped: ${res.writableLength} bytes unread by ${req.socket.remoteAddress ?? 'unknown'} (limit ${streamBufferBytes})`,
        );
        end();
        res.destroy();
        return;
      }
      res.write(text);
    };
    const send = (event: string, data: unknown) => write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    write('retry: 2000\n\n'); // a stream ended by its age is opened again by the page 2 s later
    send('view', view);
    let last = '';
    let lastWrite = Date.now();
    let away = false;
    while (!ended && !this.closing && Date.now() - opened < streamMs) {
      await new Promise((r) => setTimeout(r, pollMs));
      if (ended || this.closing) break;
      try {
        const print = await withinTemporal(connection, `the status of ${id}`, () => liveFingerprint(sources, id));
        // Back from a problem, the view is sent again even unchanged: the page clears its notice on it.
        if (print !== last || away) {
          view = await viewOf();
          last = print;
          away = false;
          send('view', view);
          lastWrite = Date.now();
        }
        if (view.temporalStatus !== 'RUNNING') {
          send('end', { state: view.state });
          break;
        }
      } catch (err) {
        // Temporal away: say so on the page and keep polling.
        away = true;
        send('problem', { message: err instanceof WavegateError ? err.message : firstLineOf(err) });
        lastWrite = Date.now();
        await new Promise((r) => setTimeout(r, 5 * pollMs));
      }
      if (Date.now() - lastWrite > BOARD_LIMITS.heartbeatMs) {
        write(': still here\n\n');
        lastWrite = Date.now();
      }
    }
    end();
    res.end();
  }
}
