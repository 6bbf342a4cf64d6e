// Delta replies (docs/PROTOCOL.md, "Delta replies"): a reply held, read
// into its members and message array, with the chain of every prefix of
// the array, so that a delta against it is put back together into the
// whole reply, byte for byte, and checked against its digest. This is
// pkg/protocol's Held, for JSON replies.

import { createHash } from "node:crypto";

import { ReplyError } from "./errors.js";

const ARRAY_KEYS = new Set(["messages", "input", "contents"]);
const OTHER_KEYS = new Set(["system", "systemInstruction"]);
const td = new TextDecoder("utf-8", { fatal: true });
const te = new TextEncoder();
const ZERO: Uint8Array = new Uint8Array(32);

interface Member {
  key: string;
  keyStart: number;
  keyEnd: number;
  start: number;
  end: number;
}

interface Parsed {
  members: Member[];
  array: number;
  items: [number, number][];
  other: number;
  seq: string;
  digest: string;
  keep: number | undefined;
}

/** A whole reply held to apply the next delta to. */
export interface Held {
  /** The reply's bytes. */
  body: Uint8Array;
  /** Its seq, as the reply spells it (a stream sequence may pass 2^53). */
  seq: string;
  /** Its digest ("" when it has none). */
  digest: string;
  items: [number, number][];
  chain: Uint8Array[];
}

function next(c: Uint8Array, item: Uint8Array): Uint8Array {
  return createHash("sha256").update(c).update(item).digest();
}

function digestOf(c: Uint8Array, other: Uint8Array): string {
  return createHash("sha256").update(c).update(other).digest("hex");
}

function isSpace(b: number): boolean {
  return b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;
}

function space(b: Uint8Array, i: number): number {
  while (i < b.length && isSpace(b[i])) i++;
  return i;
}

function bad(what: string): ReplyError {
  return new ReplyError("delta", what);
}

// skip returns where the JSON value at b[i] ends: it checks brackets and
// strings, not the scalars' spelling.
function skip(b: Uint8Array, i: number): number {
  if (i >= b.length) throw bad(`a value expected at byte ${i}`);
  const c = b[i];
  if (c === 0x22) {
    for (let j = i + 1; j < b.length; j++) {
      if (b[j] === 0x5c) j++;
      else if (b[j] === 0x22) return j + 1;
    }
    throw bad(`a string at byte ${i} does not end`);
  }
  if (c === 0x5b || c === 0x7b) {
    // Iterative: a stack of the closing brackets expected.
    const stack: number[] = [];
    let j = i;
    for (;;) {
      const o = b[j];
      if (o === 0x5b || o === 0x7b) {
        stack.push(o === 0x5b ? 0x5d : 0x7d);
        j = space(b, j + 1);
        if (b[j] === stack[stack.length - 1]) {
          stack.pop();
          j++;
        } else {
          if (o === 0x7b) j = key(b, j);
          continue;
        }
      } else {
        j = scalar(b, j);
      }
      // After a value: a comma, or closing brackets.
      for (;;) {
        if (stack.length === 0) return j;
        j = space(b, j);
        if (b[j] === 0x2c) {
          j = space(b, j + 1);
          if (stack[stack.length - 1] === 0x7d) j = key(b, j);
          break;
        }
        if (b[j] === stack[stack.length - 1]) {
          stack.pop();
          j++;
          continue;
        }
        throw bad(`',' or a closing bracket expected at byte ${j}`);
      }
    }
  }
  return scalar(b, i);
}

// key skips an object's key and its colon, to the value.
function key(b: Uint8Array, j: number): number {
  if (b[j] !== 0x22) throw bad(`a key expected at byte ${j}`);
  j = space(b, skip(b, j));
  if (b[j] !== 0x3a) throw bad(`':' expected at byte ${j}`);
  return space(b, j + 1);
}

function scalar(b: Uint8Array, i: number): number {
  if (b[i] === 0x22) return skip(b, i);
  let j = i;
  while (j < b.length) {
    const c = b[j];
    const ok = c === 0x2d || c === 0x2b || c === 0x2e || (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a);
    if (!ok) break;
    j++;
  }
  if (j === i) throw bad(`a value expected at byte ${i}`);
  return j;
}

function parse(b: Uint8Array): Parsed {
  const p: Parsed = { members: [], array: -1, items: [], other: -1, seq: "", digest: "", keep: undefined };
  if (b[0] !== 0x7b) throw bad("not a JSON object");
  let i = space(b, 1);
  if (b[i] === 0x7d) throw bad("no message array");
  for (;;) {
    if (b[i] !== 0x22) throw bad(`a key expected at byte ${i}`);
    const ks = i;
    const ke = skip(b, i);
    const name = JSON.parse(td.decode(b.subarray(ks, ke))) as string;
    i = space(b, ke);
    if (b[i] !== 0x3a) throw bad(`':' expected at byte ${i}`);
    const vs = space(b, i + 1);
    const ve = skip(b, vs);
    if (p.members.some((m) => m.key === name)) throw bad(`${name} twice`);
    p.members.push({ key: name, keyStart: ks, keyEnd: ke, start: vs, end: ve });
    const text = () => td.decode(b.subarray(vs, ve));
    if (ARRAY_KEYS.has(name)) {
      if (p.array >= 0 || b[vs] !== 0x5b) throw bad("two message arrays, or one that is not an array");
      p.array = p.members.length - 1;
      let j = space(b, vs + 1);
      while (j < ve - 1) {
        const e = skip(b, j);
        p.items.push([j, e]);
        j = space(b, e);
        if (b[j] !== 0x2c) break;
        j = space(b, j + 1);
      }
    } else if (OTHER_KEYS.has(name)) {
      p.other = p.members.length - 1;
    } else if (name === "seq") {
      if (!/^[0-9]+$/.test(text())) throw bad("seq is not a whole number");
      p.seq = text();
    } else if (name === "digest") {
      p.digest = JSON.parse(text());
      if (typeof p.digest !== "string") throw bad("digest is not a string");
    } else if (name === "delta") {
      const d = JSON.parse(text());
      if (typeof d?.keep !== "number" || !Number.isSafeInteger(d.keep) || d.keep < 0) throw bad("delta has no keep");
      p.keep = d.keep;
    }
    i = space(b, ve);
    if (b[i] === 0x2c) {
      i = space(b, i + 1);
      continue;
    }
    if (b[i] === 0x7d && space(b, i + 1) === b.length) break;
    throw bad(`',' or '}' expected at byte ${i}`);
  }
  if (p.array < 0) throw bad("no message array");
  return p;
}

function otherOf(b: Uint8Array, p: Parsed): Uint8Array {
  if (p.other < 0) return new Uint8Array(0);
  const m = p.members[p.other];
  return b.subarray(m.start, m.end);
}

/** hold reads a whole reply to hold. */
export function hold(body: Uint8Array): Held {
  const p = parse(body);
  if (p.keep !== undefined) throw bad("a delta reply is not whole");
  const chain: Uint8Array[] = [];
  let c: Uint8Array = ZERO;
  for (const [s, e] of p.items) {
    c = next(c, body.subarray(s, e));
    chain.push(c);
  }
  return { body, seq: p.seq, digest: p.digest, items: p.items, chain };
}

/**
 * apply returns the whole reply a reply stands for: the reply itself when
 * it is whole, else the delta applied to the reply held, checked against
 * its digest. h is not changed.
 */
export function apply(h: Held, reply: Uint8Array): Held {
  const d = parse(reply);
  if (d.keep === undefined) return hold(reply);
  const keep = d.keep;
  if (keep > h.items.length) throw bad(`delta keeps ${keep} messages, the reply held has ${h.items.length}`);
  const parts: Uint8Array[] = [];
  const items: [number, number][] = [];
  let size = 0;
  const put = (b: Uint8Array) => {
    parts.push(b);
    size += b.length;
  };
  const comma = te.encode(",");
  put(te.encode("{"));
  let first = true;
  d.members.forEach((m, mi) => {
    if (m.key === "delta") return;
    if (!first) put(comma);
    first = false;
    put(reply.subarray(m.keyStart, m.keyEnd));
    put(te.encode(":"));
    if (mi !== d.array) {
      put(reply.subarray(m.start, m.end));
      return;
    }
    put(te.encode("["));
    if (keep > 0) {
      const from = h.items[0][0];
      const at = size;
      put(h.body.subarray(from, h.items[keep - 1][1]));
      for (const [s, e] of h.items.slice(0, keep)) items.push([s - from + at, e - from + at]);
    }
    d.items.forEach(([s, e], i) => {
      if (keep > 0 || i > 0) put(comma);
      items.push([size, size + e - s]);
      put(reply.subarray(s, e));
    });
    put(te.encode("]"));
  });
  put(te.encode("}"));
  const body = new Uint8Array(size);
  let at = 0;
  for (const b of parts) {
    body.set(b, at);
    at += b.length;
  }
  const chain = h.chain.slice(0, keep);
  let c: Uint8Array = keep > 0 ? chain[keep - 1] : ZERO;
  for (const [s, e] of d.items) {
    c = next(c, reply.subarray(s, e));
    chain.push(c);
  }
  if (d.digest !== "" && digestOf(c, otherOf(reply, d)) !== d.digest) {
    throw bad(`the context made from the delta does not have the reply's digest ${d.digest}`);
  }
  return { body, seq: d.seq, digest: d.digest, items, chain };
}
