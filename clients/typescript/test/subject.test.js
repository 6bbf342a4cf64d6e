// Session ids, subjects and partitions: pure, no NATS. The cases are
// pkg/subject's, so that both clients refuse the same ids in the same words.

import { test } from "node:test";
import assert from "node:assert/strict";

import {
  checkSession,
  contextSubject,
  InvalidSessionError,
  partition,
  partitionSubject,
  requestBody,
  BadRequestError,
  timeoutOf,
  transcriptSubject,
} from "../dist/index.js";

test("checkSession accepts 1 to 128 characters of A-Z a-z 0-9 _ -", () => {
  for (const id of ["s1", "A", "a-b_C-9", "x".repeat(128)]) checkSession(id);
  for (const id of ["", "a.b", "*", ">", "a b", "a*b", "ä", "a\x00", "x".repeat(129), "a\n", "s1.>", "\ud800", undefined, 7]) {
    assert.throws(() => checkSession(id), InvalidSessionError, JSON.stringify(id));
  }
});

test("checkSession names the character and its position as pkg/subject does", () => {
  const cases = [
    ["", "invalid session id: empty"],
    ["a.b", `invalid session id: "a.b" has '.' at character 2; use only A-Z a-z 0-9 _ -`],
    ["séance", `invalid session id: "séance" has 'é' (U+00E9) at character 2; use only A-Z a-z 0-9 _ -`],
    ["transcripts.séance", `invalid session id: "transcripts.séance" has '.' at character 12; use only A-Z a-z 0-9 _ -`],
    ["日本語", `invalid session id: "日本語" has '日' (U+65E5) at character 1; use only A-Z a-z 0-9 _ -`],
    ["ab😀", `invalid session id: "ab😀" has '😀' (U+1F600) at character 3; use only A-Z a-z 0-9 _ -`],
    ["a\u200bb", `invalid session id: "a\\u200bb" has '\\u200b' (U+200B) at character 2; use only A-Z a-z 0-9 _ -`],
    ["a\nb", `invalid session id: "a\\nb" has '\\n' at character 2; use only A-Z a-z 0-9 _ -`],
    ["a\x00", `invalid session id: "a\\x00" has '\\x00' at character 2; use only A-Z a-z 0-9 _ -`],
    ['a"b', `invalid session id: "a\\"b" has '"' at character 2; use only A-Z a-z 0-9 _ -`],
    ["a'b", `invalid session id: "a'b" has '\\'' at character 2; use only A-Z a-z 0-9 _ -`],
    ["a\\b", `invalid session id: "a\\\\b" has '\\\\' at character 2; use only A-Z a-z 0-9 _ -`],
    ["x".repeat(129), "invalid session id: 129 characters, at most 128"],
    ["é".repeat(129), `invalid session id: "${"é".repeat(40)}..." has 'é' (U+00E9) at character 1; use only A-Z a-z 0-9 _ -`],
    ["x".repeat(128) + "é", "invalid session id: 129 characters, at most 128"],
    // The id quoted is cut after 40 characters, never inside one.
    ["é".repeat(39) + "ab.", `invalid session id: "${"é".repeat(39)}a..." has 'é' (U+00E9) at character 1; use only A-Z a-z 0-9 _ -`],
    ["x-" + "é".repeat(50), `invalid session id: "x-${"é".repeat(38)}..." has 'é' (U+00E9) at character 3; use only A-Z a-z 0-9 _ -`],
    // A JavaScript string may hold half a UTF-16 pair, which has no UTF-8.
    ["ab\ud800c", `invalid session id: "ab\\ud800c" is not valid Unicode: lone surrogate 0xd800 at character 3`],
  ];
  for (const [id, want] of cases) {
    assert.throws(() => checkSession(id), (err) => {
      assert.ok(err instanceof InvalidSessionError);
      assert.equal(err.message, want, JSON.stringify(id));
      return true;
    });
  }
});

test("subjects", () => {
  assert.equal(transcriptSubject("s1"), "transcripts.s1");
  assert.equal(contextSubject("s1"), "ctxd.context.s1");
  assert.throws(() => contextSubject("a.b"), InvalidSessionError);
  assert.throws(() => transcriptSubject("s1.>"), InvalidSessionError);
  assert.throws(() => partitionSubject("a.b", 8), InvalidSessionError);
});

test("partition is FNV-32a of the session id mod P, as pkg/subject", () => {
  assert.equal(partition("s1", 1), 0);
  assert.equal(partition("s1", 0), 0);
  // fnv32a("s1") % 8 = 1, as the stream's transform stores it.
  assert.equal(partition("s1", 8), 1);
  assert.equal(partitionSubject("s1", 8), "ctxd.p.1.s1");
  // FNV-32a's published test vectors: "a" = 0xe40c292c, "foobar" = 0xbf9cf968.
  assert.equal(partition("a", 0xe40c292c + 1), 0xe40c292c);
  assert.equal(partition("foobar", 0xbf9cf968 + 1), 0xbf9cf968);
});

test("timeoutOf leaves the reply a fifth of the time, at most 250 ms, at least 1 ms", () => {
  assert.equal(timeoutOf(1000, 0), 800);
  assert.equal(timeoutOf(10000, 0), 9750);
  assert.equal(timeoutOf(0, 0), 1);
  assert.equal(timeoutOf(-5, 0), 1);
});

test("requestBody sends the fields set, and refuses bad ones naming them", () => {
  const body = (o, t = 100) => new TextDecoder().decode(requestBody(o, t));
  assert.equal(body({}), `{"min_seq":0,"timeout_ms":100}`);
  assert.equal(
    body({ minSeq: 15, waitMs: 0, format: "anthropic", budgetTokens: 1000, edits: [{ op: "x" }] }),
    `{"min_seq":15,"wait_ms":0,"timeout_ms":100,"format":"anthropic","budget_tokens":1000,"edits":[{"op":"x"}]}`,
  );
  assert.equal(body({ minSeq: 18446744073709551615n }), `{"min_seq":18446744073709551615,"timeout_ms":100}`);
  assert.equal(body({ budgetTokens: 0 }), `{"min_seq":0,"timeout_ms":100}`);
  for (const [o, name] of [
    [{ minSeq: -1 }, "minSeq"],
    [{ minSeq: 1.5 }, "minSeq"],
    [{ minSeq: "3" }, "minSeq"],
    [{ minSeq: 18446744073709551616n }, "minSeq"],
    [{ minSeq: 2 ** 60 }, "minSeq"],
    [{ waitMs: -1 }, "waitMs"],
    [{ waitMs: NaN }, "waitMs"],
    [{ budgetTokens: -3 }, "budgetTokens"],
    [{ format: 3 }, "format"],
  ]) {
    assert.throws(() => requestBody(o, 100), (err) => err instanceof BadRequestError && err.message.includes(name), JSON.stringify(String(o)));
  }
});
