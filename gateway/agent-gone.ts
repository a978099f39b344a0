import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * That the agent closed its connection before its answer: a flag and the callbacks waiting on it. An AbortController
 * does the same through an EventTarget (two Maps and a listener record: about 1.2 KB a request), and a long-poll holds
 * its own for the whole wait (bench/README.md, "Gateway memory").
 */
export class AgentGone {
  aborted = false;
  private waiting: Array<() => void> | undefined;

  /** Gone once `res` closes before its answer is written (already gone when the socket is). */
  static watching(req: IncomingMessage, res: ServerResponse): AgentGone {
    const gone = new AgentGone();
    if (req.socket?.destroyed ?? true) gone.abort();
    else
      res.once('close', () => {
        if (!res.writableFinished) gone.abort();
      });
    return gone;
  }

  /** Run `callback` once when the agent goes (at once if it has); the function returned forgets it. */
  whenGone(callback: () => void): () => void {
    if (this.aborted) {
      callback();
      return () => {};
    }
    this.waiting ??= [];
    this.waiting.push(callback);
    return () => {
      const i = this.waiting?.indexOf(callback) ?? -1;
      if (i >= 0) this.waiting!.splice(i, 1);
    };
  }

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    const waiting = this.waiting;
    this.waiting = undefined;
    for (const callback of waiting ?? []) callback();
  }
}
