// One request to the service, and its reply read whole: pushed or
// fetched chunks joined, service errors thrown as CtxdError. The wire is
// docs/PROTOCOL.md ("Context out"); pkg/client's do is the same in Go.

import { createInbox, headers, Match } from "@nats-io/transport-node";
import type { Msg, NatsConnection } from "@nats-io/transport-node";

import { CtxdError, NoServiceError, permissionError, ReplyError, RequestTimeoutError } from "./errors.js";

// Headers of a chunked reply, as the service sends them.
export const HEADER_CHUNKS = "Ctxd-Chunks";
export const HEADER_CHUNK = "Ctxd-Chunk";
export const HEADER_CHUNK_SUBJECT = "Ctxd-Chunk-Subject";
export const HEADER_REPLY_BYTES = "Ctxd-Reply-Bytes";
export const HEADER_ACCEPT_CHUNKS = "Ctxd-Accept-Chunks";
// The NATS service error headers.
export const HEADER_ERROR_CODE = "Nats-Service-Error-Code";
export const HEADER_ERROR = "Nats-Service-Error";

/** How one request waits. */
export interface Wait {
  /** When the answer (the first chunk) must have come, in Date.now() milliseconds. */
  deadline: number;
  /** When set, each chunk after the first is waited for this long, past deadline. */
  chunkTimeoutMs?: number;
  /** Ends the wait at once, with its reason. */
  signal?: AbortSignal;
}

/**
 * timeoutOf returns how long the service has to answer a request whose
 * answer must come by deadline: the time left, less a margin for the
 * reply's way back (a fifth, at most 250 ms), at least 1 ms.
 */
export function timeoutOf(deadline: number, now = Date.now()): number {
  const left = deadline - now;
  return Math.max(1, Math.floor(left - Math.min(left / 5, 250)));
}

// A subscription's messages, read one at a time with a deadline.
class Queue {
  private msgs: Msg[] = [];
  private err: Error | undefined;
  private wake: (() => void) | undefined;

  push(m: Msg): void {
    this.msgs.push(m);
    this.notify();
  }

  fail(err: Error): void {
    this.err ??= err;
    this.notify();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  async next(subject: string, deadline: number, what: string, signal?: AbortSignal): Promise<Msg> {
    for (;;) {
      const m = this.msgs.shift();
      if (m) return m;
      if (this.err) throw this.err;
      signal?.throwIfAborted();
      const left = deadline - Date.now();
      if (left <= 0) throw new RequestTimeoutError(subject, `no ${what} in time`);
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", done);
          this.wake = undefined;
          resolve();
        };
        const timer = setTimeout(done, left);
        signal?.addEventListener("abort", done, { once: true });
        this.wake = done;
      });
    }
  }
}

function header(m: Msg, name: string): string {
  return m.headers?.get(name, Match.IgnoreCase) ?? "";
}

// check throws what a message that is not a reply says: no responders,
// or a service error.
function check(m: Msg, subject: string): void {
  if (m.data.length === 0 && m.headers && (m.headers.code === 503 || m.headers.status === "503")) {
    throw new NoServiceError(subject);
  }
  const code = header(m, HEADER_ERROR_CODE);
  if (code !== "") throw new CtxdError(code, header(m, HEADER_ERROR), subject);
}

// count parses a header that must be a whole number of at least min.
function count(m: Msg, name: string, min: number, subject: string): number | undefined {
  const v = header(m, name);
  if (v === "") return undefined;
  if (!/^[0-9]{1,15}$/.test(v) || Number(v) < min) {
    throw new ReplyError(subject, `header ${name} is ${JSON.stringify(v)}, not a whole number of at least ${min}`);
  }
  return Number(v);
}

/**
 * request sends body to subject and returns the reply body whole. It asks
 * for the chunks of a reply larger than the max payload to be pushed to
 * its own inbox (Ctxd-Accept-Chunks: push); a reply that names
 * Ctxd-Chunk-Subject instead (over 32 MiB, or a service of protocol 2)
 * has its chunks fetched one after the other. The size is checked
 * against Ctxd-Reply-Bytes.
 */
export async function request(
  nc: NatsConnection,
  inboxPrefix: string | undefined,
  subject: string,
  body: Uint8Array,
  wait: Wait,
): Promise<Uint8Array> {
  wait.signal?.throwIfAborted();
  const inbox = createInbox(inboxPrefix);
  const q = new Queue();
  const fail = (err: Error) => q.fail(permissionError(err) ?? err);
  const sub = nc.subscribe(inbox, {
    callback: (err, m) => (err ? fail(err) : q.push(m)),
  });
  // A subscription the server refuses (a user allowed another inbox
  // prefix) closes with the error that names it.
  void sub.closed.then((err) => {
    if (err) fail(err);
  });
  // nats.js hands a refused publish to the subscription that waits for
  // its answer, found by this field, as it does for its own requests.
  const waitFor = (subj: string) => {
    (sub as unknown as { requestSubject?: string }).requestSubject = subj;
  };
  try {
    const h = headers();
    h.set(HEADER_ACCEPT_CHUNKS, "push");
    waitFor(subject);
    nc.publish(subject, body, { reply: inbox, headers: h });
    const first = await q.next(subject, wait.deadline, "answer", wait.signal);
    check(first, subject);
    const n = count(first, HEADER_CHUNKS, 1, subject);
    if (n === undefined || n === 1) return first.data;
    const k0 = header(first, HEADER_CHUNK);
    if (k0 !== "" && k0 !== "0") throw new ReplyError(subject, `the first chunk is chunk ${JSON.stringify(k0)}`);
    const total = count(first, HEADER_REPLY_BYTES, 0, subject);
    const prefix = header(first, HEADER_CHUNK_SUBJECT);
    const parts: Uint8Array[] = [first.data];
    let got = first.data.length;
    for (let k = 1; k < n; k++) {
      const deadline = wait.chunkTimeoutMs ? Date.now() + wait.chunkTimeoutMs : wait.deadline;
      const what = `chunk ${k + 1} of ${n}`;
      let part: Msg;
      if (prefix !== "") {
        const chunkSubject = `${prefix}.${k}`;
        waitFor(chunkSubject);
        nc.publish(chunkSubject, new Uint8Array(0), { reply: inbox });
        part = await q.next(chunkSubject, deadline, what, wait.signal);
        check(part, chunkSubject);
      } else {
        part = await q.next(subject, deadline, what, wait.signal);
        check(part, subject);
        const kh = header(part, HEADER_CHUNK);
        if (kh !== String(k)) throw new ReplyError(subject, `${what}: got chunk ${JSON.stringify(kh)}`);
      }
      got += part.data.length;
      if (total !== undefined && got > total) {
        throw new ReplyError(subject, `chunked reply: more than the ${total} bytes of ${HEADER_REPLY_BYTES} by ${what}`);
      }
      parts.push(part.data);
    }
    if (total !== undefined && got !== total) {
      throw new ReplyError(subject, `chunked reply: got ${got} bytes, expected ${total}`);
    }
    return concat(parts, got);
  } finally {
    sub.unsubscribe();
  }
}

function concat(parts: Uint8Array[], size: number): Uint8Array {
  const out = new Uint8Array(size);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}
