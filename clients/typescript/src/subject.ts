// Subjects of the wire contract and session id checks, as the Go
// package pkg/subject does them: a bad id is refused before it can
// become another subject, with the same error wording.

import { InvalidSessionError } from "./errors.js";

/** Prefix of the subjects records are published to. */
export const TRANSCRIPTS_PREFIX = "transcripts.";
/** Prefix of the subjects contexts are requested on. */
export const CONTEXT_PREFIX = "ctxd.context.";
/** Prefix of the per-partition context endpoints, ctxd.p.<k>.<session>. */
export const PARTITION_PREFIX = "ctxd.p.";
/** The longest session id accepted, in characters. */
export const MAX_SESSION_LEN = 128;

const printable = /^[\p{L}\p{M}\p{N}\p{P}\p{S}]$/u;

function allowed(c: number): boolean {
  return (
    (c >= 0x61 && c <= 0x7a) || // a-z
    (c >= 0x41 && c <= 0x5a) || // A-Z
    (c >= 0x30 && c <= 0x39) || // 0-9
    c === 0x5f || // _
    c === 0x2d // -
  );
}

function hex(n: number, width: number): string {
  return n.toString(16).padStart(width, "0");
}

// escapeRune writes one code point as Go's strconv.Quote and QuoteRune
// do, inside the quote character q.
function escapeRune(cp: number, q: string): string {
  const ch = String.fromCodePoint(cp);
  if (ch === q || ch === "\\") return "\\" + ch;
  if (cp === 0x20 || (cp >= 0x80 && !isSurrogate(cp) && printable.test(ch))) return ch;
  if (cp > 0x20 && cp < 0x7f) return ch;
  switch (cp) {
    case 0x07:
      return "\\a";
    case 0x08:
      return "\\b";
    case 0x0c:
      return "\\f";
    case 0x0a:
      return "\\n";
    case 0x0d:
      return "\\r";
    case 0x09:
      return "\\t";
    case 0x0b:
      return "\\v";
  }
  if (cp < 0x20 || cp === 0x7f) return "\\x" + hex(cp, 2);
  if (cp < 0x10000) return "\\u" + hex(cp, 4);
  return "\\U" + hex(cp, 8);
}

function isSurrogate(cp: number): boolean {
  return cp >= 0xd800 && cp <= 0xdfff;
}

// goQuote is Go's %q of a string.
function goQuote(s: string): string {
  let out = '"';
  for (const ch of s) out += escapeRune(ch.codePointAt(0)!, '"');
  return out + '"';
}

// describeRune quotes a character, with its code point when it is not
// ASCII: 'é' (U+00E9), '\u200b' (U+200B).
function describeRune(cp: number): string {
  const quoted = "'" + escapeRune(cp, "'") + "'";
  if (cp < 0x80) return quoted;
  return `${quoted} (U+${cp.toString(16).toUpperCase().padStart(4, "0")})`;
}

// truncate cuts s after 40 characters, for an error message; never
// inside a character.
function truncate(s: string): string {
  let n = 0;
  let i = 0;
  for (const ch of s) {
    if (n === 40) return s.slice(0, i) + "...";
    n++;
    i += ch.length;
  }
  return s;
}

/**
 * checkSession throws an InvalidSessionError naming what is wrong with a
 * session id: it must be 1 to 128 characters of A-Z a-z 0-9 _ -. The
 * error names the first character that is not allowed, whole (a
 * non-ASCII one with its code point), and its position counted in
 * characters from 1, in the words of the Go client and the service.
 */
export function checkSession(id: unknown): asserts id is string {
  if (typeof id !== "string") {
    throw new InvalidSessionError(`invalid session id: a ${id === null ? "null" : typeof id}, not a string`);
  }
  if (id === "") throw new InvalidSessionError("invalid session id: empty");
  let pos = 0;
  for (const ch of id) {
    pos++;
    if (pos > MAX_SESSION_LEN) {
      throw new InvalidSessionError(
        `invalid session id: ${[...id].length} characters, at most ${MAX_SESSION_LEN}`,
      );
    }
    const cp = ch.codePointAt(0)!;
    if (cp < 0x80 && allowed(cp)) continue;
    if (isSurrogate(cp)) {
      // A JavaScript string can hold half of a UTF-16 pair, which has
      // no UTF-8 encoding: named as the code unit it is.
      throw new InvalidSessionError(
        `invalid session id: ${goQuote(truncate(id))} is not valid Unicode: lone surrogate 0x${hex(cp, 4)} at character ${pos}`,
      );
    }
    throw new InvalidSessionError(
      `invalid session id: ${goQuote(truncate(id))} has ${describeRune(cp)} at character ${pos}; use only A-Z a-z 0-9 _ -`,
    );
  }
}

/** transcriptSubject returns the subject a session's records are published to. */
export function transcriptSubject(session: string): string {
  checkSession(session);
  return TRANSCRIPTS_PREFIX + session;
}

/** contextSubject returns the subject a session's context is requested on. */
export function contextSubject(session: string): string {
  checkSession(session);
  return CONTEXT_PREFIX + session;
}

/**
 * partition returns the partition of a session among p, as the stream's
 * subject transform {{partition(p,1)}} computes it: FNV-32a of the
 * session id, modulo p. With p <= 1 every session is in partition 0.
 */
export function partition(session: string, p: number): number {
  if (p <= 1) return 0;
  let h = 0x811c9dc5; // FNV-32a offset basis
  for (const b of new TextEncoder().encode(session)) {
    h = Math.imul(h ^ b, 16777619) >>> 0; // FNV-32a prime
  }
  return h % p;
}

/**
 * partitionSubject returns the subject a session's context is requested
 * on at its partition's owner, ctxd.p.<k>.<session>.
 */
export function partitionSubject(session: string, p: number): string {
  checkSession(session);
  return PARTITION_PREFIX + partition(session, p) + "." + session;
}
