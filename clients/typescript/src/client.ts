// The client: connect, publish records, fetch contexts, close.

import { connect as natsConnect, Empty, RequestError } from "@nats-io/transport-node";
import type { NatsConnection, NodeConnectionOptions } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import type { JetStreamClient, JetStreamPublishOptions } from "@nats-io/jetstream";

import { BadRequestError, NoServiceError, permissionError, ReplyError, RequestTimeoutError } from "./errors.js";
import { apply, hold } from "./delta.js";
import type { Held } from "./delta.js";
import { request, timeoutOf } from "./request.js";
import { checkSession, contextSubject, partitionSubject, transcriptSubject } from "./subject.js";
import type { Edits, Format, ReplyFor, TranscriptRecord } from "./types.js";

/** Options of connect: the nats.js connection options, and partitions. */
export interface ConnectOptions extends NodeConnectionOptions {
  /**
   * The stream's number of partitions, to send each context request to
   * the instance that applies the session's partition first
   * (ctxd.p.<k>.<session>), and to ctxd.context.<session> when none holds
   * it or it does not answer in half the time. "auto" reads it from the
   * service ($SRV.INFO.ctxd metadata) at connect, or at the first request
   * when no service answered then. Default 1: every request goes to
   * ctxd.context.<session>, which every instance answers.
   */
  partitions?: "auto" | number;
}

/** Options of publish. */
export interface PublishOptions {
  /** Nats-Msg-Id: a retry with the same id within the stream's duplicate window (2 minutes) is stored once. */
  msgId?: string;
  /** Nats-Expected-Last-Subject-Sequence: store the record only if the session's last record has this sequence. */
  expectedLastSubjectSequence?: number;
  /** How long to wait for the PubAck, in ms (default 5000). */
  timeoutMs?: number;
}

/** What the stream said of a published record. */
export interface PublishAck {
  /** The record's stream sequence: pass it as minSeq to read your own write. */
  seq: number;
  /** The stream's name. */
  stream: string;
  /** True when a record with the same msgId was stored already (seq is that record's). */
  duplicate: boolean;
}

/** Options of a context request. */
export interface ContextOptions<F extends Format | undefined = Format | undefined> {
  /** Answer once every record up to this stream sequence is applied (default 0). */
  minSeq?: number | bigint;
  /** How long the service may wait for minSeq, in ms: default 2000, at most 30000; 0: answer now or fail with 504. */
  waitMs?: number;
  /** The provider body: "anthropic", "openai-chat", "openai-responses" or "gemini"; default the neutral context. */
  format?: F;
  /** Ask whether the context is over this many estimated input tokens, and where a compaction may cut. */
  budgetTokens?: number;
  /** Context edits applied before rendering (docs/EDITS.md): sent as the request's edits field. */
  edits?: Edits;
  /**
   * The client keeps each session's last reply (per format) and asks for
   * the next against it: the service sends the messages that changed, and
   * the client returns the whole reply, put back together and checked
   * against its digest (docs/PROTOCOL.md, "Delta replies"). false turns
   * this off for the request: the reply is asked for whole. Default true.
   */
  delta?: boolean;
  /**
   * false asks for the reply without its digest, as protocol 3.4 sent it
   * (only with delta false, and without haveSeq/haveDigest). A reply
   * carries its digest otherwise; true asks for it in so many words, as
   * a service before 3.5 needs.
   */
  digest?: boolean;
  /**
   * The seq and digest of a reply held: the reply may then be a delta
   * against it, returned raw, as the service sent it. Both or neither;
   * the client's own keeping is off for the request.
   */
  haveSeq?: number | bigint | string;
  haveDigest?: string;
  /**
   * How long the client waits for the answer, in ms; the service is told
   * (timeout_ms) and answers within it. Default: waitMs (at most 30000) + 5000.
   */
  timeoutMs?: number;
  /**
   * Once the first chunk of a large reply came, each next chunk is waited
   * for this long, past timeoutMs (default 30000; 0: all within timeoutMs).
   */
  chunkTimeoutMs?: number;
  /** Ends the request at once. */
  signal?: AbortSignal;
}

const UINT64_MAX = (1n << 64n) - 1n;
const te = new TextEncoder();
const td = new TextDecoder("utf-8", { fatal: true });

function wholeNumber(name: string, v: unknown, min: number): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min) {
    throw new BadRequestError(`${name} must be a whole number of at least ${min}, got ${String(v)}`);
  }
  return v;
}

function checkPartitions(p: unknown): void {
  if (p === undefined || p === "auto") return;
  if (typeof p !== "number" || !Number.isSafeInteger(p) || p < 1) {
    throw new BadRequestError(`partitions must be "auto" or a whole number of at least 1, got ${String(p)}`);
  }
}

/**
 * requestBody is the JSON request: min_seq always, the other fields
 * when set. timeout_ms tells the service how long the client waits.
 */
export function requestBody(opts: ContextOptions, timeoutMs: number): Uint8Array {
  let minSeq: bigint | number = 0;
  if (opts.minSeq !== undefined) {
    if (typeof opts.minSeq === "bigint") {
      if (opts.minSeq < 0n || opts.minSeq > UINT64_MAX) {
        throw new BadRequestError(`minSeq must be from 0 to ${UINT64_MAX}, got ${opts.minSeq}`);
      }
      minSeq = opts.minSeq;
    } else {
      minSeq = wholeNumber("minSeq", opts.minSeq, 0);
    }
  }
  let body = `{"min_seq":${minSeq}`;
  if (opts.waitMs !== undefined) body += `,"wait_ms":${wholeNumber("waitMs", opts.waitMs, 0)}`;
  body += `,"timeout_ms":${timeoutMs}`;
  if (opts.format !== undefined) {
    if (typeof opts.format !== "string") throw new BadRequestError(`format must be a string, got ${typeof opts.format}`);
    body += `,"format":${JSON.stringify(opts.format)}`;
  }
  if (opts.budgetTokens !== undefined && wholeNumber("budgetTokens", opts.budgetTokens, 0) > 0) {
    body += `,"budget_tokens":${opts.budgetTokens}`;
  }
  if (opts.edits !== undefined) body += `,"edits":${JSON.stringify(opts.edits)}`;
  if ((opts.haveSeq === undefined) !== (opts.haveDigest === undefined)) {
    throw new BadRequestError("haveSeq and haveDigest go together: give both, or neither");
  }
  if (opts.haveDigest !== undefined) {
    const seq = String(opts.haveSeq);
    if (!/^[0-9]{1,20}$/.test(seq) || BigInt(seq) > UINT64_MAX) {
      throw new BadRequestError(`haveSeq must be from 0 to ${UINT64_MAX}, got ${seq}`);
    }
    if (typeof opts.haveDigest !== "string" || !/^[0-9a-f]{64}$/.test(opts.haveDigest)) {
      throw new BadRequestError(`haveDigest must be a digest of 64 lowercase hex digits, got ${JSON.stringify(opts.haveDigest)}`);
    }
    if (opts.digest === false) {
      throw new BadRequestError("digest false with haveSeq and haveDigest: a delta reply carries its digest");
    }
    body += `,"have_seq":${seq},"have_digest":"${opts.haveDigest}"`;
  } else if (opts.digest === false) {
    body += `,"digest":false`;
  } else if (opts.digest === true) {
    // A service before 3.5 adds the digest only when asked.
    body += `,"digest":true`;
  }
  return te.encode(body + "}");
}

/** Ctxd is a connection to ctxd: publish records, fetch contexts. */
export class Ctxd {
  /** The NATS connection, for anything else. close() closes it. */
  readonly nc: NatsConnection;
  private readonly js: JetStreamClient;
  private readonly inboxPrefix: string | undefined;
  private parts: number | undefined;
  private partsRetry = 0;
  // The last reply of each session and format, for deltas.
  private readonly held = new Map<string, Held>();

  /** Use connect(). */
  constructor(nc: NatsConnection, opts: { inboxPrefix?: string; partitions?: number } = {}) {
    this.nc = nc;
    this.js = jetstream(nc);
    this.inboxPrefix = opts.inboxPrefix;
    this.parts = opts.partitions;
  }

  /**
   * publish stores a record on transcripts.<session> and returns its
   * stream sequence. A record is a JSON-encoded object, or bytes
   * already encoded (a JSON object or a msgpack map), sent as they are.
   */
  async publish(session: string, record: TranscriptRecord | Uint8Array, opts: PublishOptions = {}): Promise<PublishAck> {
    const subject = transcriptSubject(session);
    let data: Uint8Array;
    if (record instanceof Uint8Array) {
      data = record;
    } else if (record !== null && typeof record === "object" && !Array.isArray(record)) {
      data = te.encode(JSON.stringify(record));
    } else {
      throw new BadRequestError(`a record is an object (or its encoding as bytes), got ${Array.isArray(record) ? "an array" : typeof record}`);
    }
    const max = this.nc.info?.max_payload;
    if (max !== undefined && data.length > max) {
      throw new BadRequestError(`the record is ${data.length} bytes, over the server's max payload of ${max} bytes`);
    }
    const popts: Partial<JetStreamPublishOptions> = { timeout: opts.timeoutMs ?? 5000 };
    if (opts.msgId !== undefined) popts.msgID = opts.msgId;
    if (opts.expectedLastSubjectSequence !== undefined) {
      popts.expect = { lastSubjectSequence: wholeNumber("expectedLastSubjectSequence", opts.expectedLastSubjectSequence, 0) };
    }
    try {
      const ack = await this.js.publish(subject, data, popts);
      return { seq: ack.seq, stream: ack.stream, duplicate: ack.duplicate };
    } catch (err) {
      if (err instanceof RequestError && err.isNoResponders()) {
        throw new NoServiceError(subject, { cause: err });
      }
      throw permissionError(err) ?? err;
    }
  }

  /**
   * context returns the session's context reply, decoded: the neutral
   * context, or with format the provider's request body, with what the
   * passes dropped, the rendering's report, usage and budget. Integers
   * above 2^53 lose precision in JavaScript numbers: contextBytes gives
   * the exact body.
   */
  async context<F extends Format | undefined = undefined>(session: string, opts: ContextOptions<F> = {}): Promise<ReplyFor<F>> {
    const body = await this.contextBytes(session, opts);
    try {
      return JSON.parse(td.decode(body)) as ReplyFor<F>;
    } catch (err) {
      throw new ReplyError(contextSubject(session), `not JSON: ${(err as Error).message}`, { cause: err });
    }
  }

  /**
   * contextBytes returns the session's context reply (JSON), whole: what
   * `ctxd context` prints, without its newline. It asks for it
   * against the reply it holds for the session and format, and keeps the
   * new one (delta, in ContextOptions); with delta false it returns what
   * `ctxd context` prints; with haveSeq and haveDigest, the raw reply.
   */
  async contextBytes(session: string, opts: ContextOptions = {}): Promise<Uint8Array> {
    if (opts.delta === false || opts.haveDigest !== undefined || opts.haveSeq !== undefined) {
      return this.exchange(session, opts);
    }
    checkSession(session);
    const key = `${session}\u0000${opts.format ?? "neutral"}`;
    const h = this.held.get(key);
    const ask = h ? { ...opts, digest: undefined, haveSeq: h.seq, haveDigest: h.digest } : { ...opts, digest: true };
    let next: Held;
    try {
      next = h ? apply(h, await this.exchange(session, ask)) : hold(await this.exchange(session, ask));
    } catch (err) {
      if (!h || !(err instanceof ReplyError)) throw err;
      // A delta that does not add up: asked again, whole.
      next = hold(await this.exchange(session, { ...opts, digest: true }));
    }
    const cur = this.held.get(key);
    if (next.digest !== "" && (!cur || BigInt(cur.seq) <= BigInt(next.seq))) this.held.set(key, next);
    return next.body;
  }

  /** forget lets go of the replies held for the session. */
  forget(session: string): void {
    for (const k of this.held.keys()) if (k.startsWith(`${session}\u0000`)) this.held.delete(k);
  }

  private async exchange(session: string, opts: ContextOptions): Promise<Uint8Array> {
    checkSession(session);
    const waitMs = opts.waitMs === undefined ? 2000 : wholeNumber("waitMs", opts.waitMs, 0);
    const timeout = opts.timeoutMs ?? Math.min(waitMs, 30000) + 5000;
    if (typeof timeout !== "number" || !(timeout > 0) || !Number.isFinite(timeout)) {
      throw new BadRequestError(`timeoutMs must be a number of ms above 0, got ${String(opts.timeoutMs)}`);
    }
    const chunkTimeoutMs = opts.chunkTimeoutMs ?? 30000;
    const deadline = Date.now() + timeout;
    requestBody(opts, 1); // refuses bad options before anything is sent
    const p = await this.partitionCount(deadline);
    if (p > 1) {
      // The owner gets half the time left: one that stalled (its
      // subscription outlives it until the server drops its connection)
      // costs the request no more than that.
      const half = Date.now() + (deadline - Date.now()) / 2;
      try {
        return await request(this.nc, this.inboxPrefix, partitionSubject(session, p), requestBody(opts, timeoutOf(half)), {
          deadline: half,
          chunkTimeoutMs,
          signal: opts.signal,
        });
      } catch (err) {
        const stalled = err instanceof RequestTimeoutError && Date.now() < deadline;
        if (!(err instanceof NoServiceError) && !stalled) throw err;
        // No instance holds the partition now, or its owner did not
        // answer in time: any instance answers, in the time left.
      }
    }
    return request(this.nc, this.inboxPrefix, contextSubject(session), requestBody(opts, timeoutOf(deadline)), {
      deadline,
      chunkTimeoutMs,
      signal: opts.signal,
    });
  }

  /**
   * partitions returns the stream's number of partitions as this client
   * routes by it: 1 when the stream has none. With partitions "auto" it
   * asks the service ($SRV.INFO.ctxd) until one answers.
   */
  async partitions(timeoutMs = 2000): Promise<number> {
    if (this.parts !== undefined) return this.parts;
    try {
      this.parts = await readPartitions(this.nc, timeoutMs);
      return this.parts;
    } catch (err) {
      if (!(err instanceof NoServiceError || err instanceof RequestTimeoutError)) throw err;
      this.partsRetry = Date.now() + 10_000;
      return 1;
    }
  }

  private async partitionCount(deadline: number): Promise<number> {
    if (this.parts !== undefined) return this.parts;
    // Unknown: no service answered at connect. Routing is a hint, so
    // these requests go to ctxd.context.<session>; the service is asked
    // again at most every 10 s, and never for more than a fifth of a
    // request's time.
    if (Date.now() < this.partsRetry) return 1;
    try {
      this.parts = await readPartitions(this.nc, Math.max(1, Math.min(2000, (deadline - Date.now()) / 5)));
      return this.parts;
    } catch (err) {
      if (!(err instanceof NoServiceError || err instanceof RequestTimeoutError)) throw err;
      this.partsRetry = Date.now() + 10_000;
      return 1;
    }
  }

  /** close closes the connection; requests in flight fail. */
  async close(): Promise<void> {
    if (!this.nc.isClosed()) await this.nc.close();
  }

  /** closed resolves when the connection closes: to the error that closed it, if any. */
  closed(): Promise<void | Error> {
    return this.nc.closed();
  }
}

/**
 * readPartitions asks the service for the stream's number of partitions
 * ($SRV.INFO.ctxd metadata "partitions"), 1 when it has none: the first
 * instance to answer says.
 */
export async function readPartitions(nc: NatsConnection, timeoutMs = 2000): Promise<number> {
  const subject = "$SRV.INFO.ctxd";
  let reply;
  try {
    reply = await nc.request(subject, Empty, { timeout: timeoutMs });
  } catch (err) {
    if (err instanceof RequestError && err.isNoResponders()) throw new NoServiceError(subject, { cause: err });
    const denied = permissionError(err, "give connect the partitions, or let the user publish to $SRV.INFO.ctxd");
    if (denied) throw denied;
    if (err instanceof Error && err.name === "TimeoutError") {
      throw new RequestTimeoutError(subject, `no answer in ${timeoutMs} ms`, { cause: err });
    }
    throw err;
  }
  let info: { metadata?: Record<string, string> };
  try {
    info = JSON.parse(td.decode(reply.data));
  } catch (err) {
    throw new ReplyError(subject, `not JSON: ${(err as Error).message}`, { cause: err });
  }
  const v = info?.metadata?.partitions;
  const p = typeof v === "string" && /^[0-9]{1,9}$/.test(v) ? Number(v) : 1;
  return p >= 1 ? p : 1;
}

/**
 * connect connects to NATS with the nats.js options (servers, user and
 * pass, token, authenticator, tls, inboxPrefix, ...) and returns a Ctxd.
 */
export async function connect(opts: ConnectOptions = {}): Promise<Ctxd> {
  const { partitions, ...natsOpts } = opts;
  checkPartitions(partitions);
  const nc = await natsConnect(natsOpts);
  const c = new Ctxd(nc, {
    inboxPrefix: natsOpts.inboxPrefix,
    partitions: partitions === "auto" ? undefined : (partitions ?? 1),
  });
  if (partitions === "auto") {
    try {
      await c.partitions();
    } catch (err) {
      await nc.close();
      throw err;
    }
  }
  return c;
}
