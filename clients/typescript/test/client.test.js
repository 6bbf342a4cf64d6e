// The client against a real ctxd serve (a subprocess, its embedded NATS
// server on a free port), compared with what the Go command line gets.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";

import { connect as natsConnect, headers } from "@nats-io/transport-node";

import {
  connect,
  CtxdError,
  InvalidSessionError,
  NoServiceError,
  partition,
  PermissionError,
  BadRequestError,
  ReplyError,
  request,
  RequestTimeoutError,
} from "../dist/index.js";
import { ctxdCommand, ctxdFails, repoRoot, startCtxd } from "./ctxd.js";

const td = new TextDecoder();
const te = new TextEncoder();

// The server allows 1 MiB messages, so that a context of a few MiB
// comes in chunks (a default NATS server's max payload).
const MAX_PAYLOAD = 1 << 20;

async function exampleRecords() {
  const text = await readFile(join(repoRoot, "examples", "session.jsonl"), "utf8");
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l));
}

// A user message of n bytes of text: kept whole in the context.
function bigRecord(i, n) {
  const line = `record ${i}: ` + "abcdefghijklmnopqrstuvwxyz0123456789".repeat(Math.ceil(n / 36));
  return { role: "user", content: [{ type: "text", text: line.slice(0, n) }], timestamp: 1764493200000 + i };
}

// spy counts the messages on a subject, as a plain subscriber: it does
// not answer, and the service's own subscription still does.
async function spy(nc, subject) {
  const seen = [];
  const sub = nc.subscribe(subject, { callback: (_err, m) => seen.push(m.subject) });
  await nc.flush();
  seen.stop = () => sub.unsubscribe();
  return seen;
}

describe("ctxd serve", () => {
  let srv, ctxd;
  before(async () => {
    srv = await startCtxd(["--max-payload", String(MAX_PAYLOAD)]);
    ctxd = await connect({ servers: srv.url });
  });
  after(async () => {
    await ctxd?.close();
    await srv?.stop();
  });

  test("publish, then context with minSeq reads its own write", async () => {
    const { seq, stream, duplicate } = await ctxd.publish("rw1", { role: "user", content: "hello", timestamp: 1 });
    assert.equal(stream, "TRANSCRIPTS");
    assert.equal(duplicate, false);
    assert.ok(seq > 0);
    const reply = await ctxd.context("rw1", { minSeq: seq });
    assert.equal(reply.session, "rw1");
    assert.ok(reply.seq >= seq);
    assert.deepEqual(reply.messages, [{ role: "user", content: "hello", timestamp: 1 }]);

    const second = await ctxd.publish("rw1", { role: "assistant", content: "hi there" }, { msgId: "rw1-2" });
    const again = await ctxd.publish("rw1", { role: "assistant", content: "hi there" }, { msgId: "rw1-2" });
    assert.equal(again.duplicate, true);
    assert.equal(again.seq, second.seq);
    const r2 = await ctxd.context("rw1", { minSeq: second.seq });
    assert.equal(r2.seq, second.seq);
    assert.equal(r2.messages.length, 2);

    // A record already encoded is sent as it is.
    const raw = await ctxd.publish("rw1", te.encode(`{"role":"user","content":"raw"}`));
    const r3 = await ctxd.context("rw1", { minSeq: raw.seq });
    assert.deepEqual(r3.messages.at(-1), { role: "user", content: "raw" });

    // A record over the server's max payload is refused before it is sent.
    await assert.rejects(ctxd.publish("rw1", bigRecord(0, MAX_PAYLOAD + 1)), (err) => {
      assert.ok(err instanceof BadRequestError);
      assert.match(err.message, new RegExp(`over the server's max payload of ${MAX_PAYLOAD} bytes`));
      return true;
    });
    await assert.rejects(ctxd.publish("rw1", [1, 2]), BadRequestError);
    await assert.rejects(ctxd.publish("rw1", "text"), BadRequestError);

    // A session never written to: seq 0, no messages.
    const empty = await ctxd.context("never-written", { waitMs: 0 });
    assert.equal(empty.session, "never-written");
    assert.equal(empty.seq, 0);
    assert.deepEqual(empty.messages, []);
  });

  test("every format returns its body, as ctxd context prints it", async () => {
    let last;
    for (const r of await exampleRecords()) last = await ctxd.publish("fmt1", r);
    const neutral = await ctxd.context("fmt1", { minSeq: last.seq, budgetTokens: 10 });
    assert.equal(neutral.seq, last.seq);
    assert.ok(neutral.messages.length > 0);
    assert.ok(neutral.dropped);
    assert.equal(typeof neutral.usage.input_tokens, "number");
    assert.equal(neutral.budget.tokens, 10);
    assert.equal(neutral.budget.over, true);

    const bodies = {
      anthropic: ["system", "messages"],
      "openai-chat": ["messages"],
      "openai-responses": ["input"],
      gemini: ["systemInstruction", "contents"],
    };
    for (const [format, fields] of Object.entries(bodies)) {
      const reply = await ctxd.context("fmt1", { minSeq: last.seq, format });
      assert.equal(reply.format, format);
      assert.equal(reply.session, "fmt1");
      assert.equal(reply.seq, last.seq);
      for (const f of fields) assert.ok(reply[f] !== undefined, `${format}: ${f}`);
      assert.ok(Array.isArray(reply.render.changes), format);
      assert.equal(typeof reply.render.ends_with_assistant, "boolean", format);
      assert.equal(typeof reply.usage.bytes, "number", format);
      assert.equal(reply.budget, undefined, format);

      const bytes = await ctxd.contextBytes("fmt1", { minSeq: last.seq, format });
      const printed = await ctxdCommand(["context", "fmt1", "--format", format, "--nats", srv.url]);
      assert.equal(Buffer.compare(Buffer.concat([bytes, Buffer.from("\n")]), printed), 0, format);
      assert.deepEqual(reply, JSON.parse(td.decode(bytes)), format);
    }
    // edits: the reply of the edited context, as ctxd context --edits prints it.
    const edits = { tool_results: { trigger_tokens: 10, keep: 0 }, thinking: { keep_turns: 0 }, images: { keep: 0, batch: 1 } };
    const withEdits = await ctxd.context("fmt1", { minSeq: last.seq, format: "anthropic", edits });
    assert.equal(withEdits.seq, last.seq);
    assert.ok(withEdits.edits.tool_results_cleared.length > 0);
    assert.ok(withEdits.edits.tokens_after < withEdits.edits.tokens_before);
    assert.equal(withEdits.usage.input_tokens, withEdits.edits.tokens_after);
    for (const c of withEdits.edits.tool_results_cleared) {
      assert.ok(JSON.stringify(withEdits.messages).includes(`[tool result cleared: ${c.tool} ${c.id}, ${c.tokens} tokens]`), c.id);
    }
    const editedBytes = await ctxd.contextBytes("fmt1", { minSeq: last.seq, format: "anthropic", edits });
    const editedPrinted = await ctxdCommand(["context", "fmt1", "--format", "anthropic", "--edits", JSON.stringify(edits), "--nats", srv.url]);
    assert.equal(Buffer.compare(Buffer.concat([editedBytes, Buffer.from("\n")]), editedPrinted), 0, "edited");
    await assert.rejects(
      ctxd.context("fmt1", { minSeq: last.seq, edits: [{ drop: 3 }] }),
      (err) => err instanceof CtxdError && err.code === "400" && err.description.includes("edits must be an object"),
    );
    await assert.rejects(
      ctxd.context("fmt1", { minSeq: last.seq, edits: { tool_results: { keep: 3 } } }),
      (err) => err instanceof CtxdError && err.code === "400" && err.description.includes("edits.tool_results.trigger_tokens is required"),
    );
  });

  test("a reply of a few MiB comes in pushed chunks, byte-equal to ctxd context", async () => {
    const fetches = await spy(ctxd.nc, "ctxd.chunk.>");
    let last;
    for (let i = 0; i < 12; i++) last = await ctxd.publish("big1", bigRecord(i, 300_000));
    const bytes = await ctxd.contextBytes("big1", { minSeq: last.seq });
    assert.ok(bytes.length > 3 * MAX_PAYLOAD, `${bytes.length} bytes`);
    const printed = await ctxdCommand(["context", "big1", "--nats", srv.url]);
    assert.equal(Buffer.compare(Buffer.concat([bytes, Buffer.from("\n")]), printed), 0);
    const reply = await ctxd.context("big1", { minSeq: last.seq });
    assert.equal(reply.messages.length, 12);
    assert.equal(reply.messages[11].content[0].text, bigRecord(11, 300_000).content[0].text);
    fetches.stop();
    assert.deepEqual([...fetches], [], "chunks fetched, not pushed");
  });

  test("a reply over 32 MiB is fetched in chunks, byte-equal to ctxd context", async () => {
    const fetches = await spy(ctxd.nc, "ctxd.chunk.>");
    let last;
    const n = 115; // 115 x 300 000 bytes: 34.5 MB, past the 32 MiB pushed at most
    const pubs = [];
    for (let i = 0; i < n; i++) pubs.push(ctxd.publish("big2", bigRecord(i, 300_000), { msgId: `big2-${i}` }));
    for (const p of pubs) {
      const ack = await p;
      if (!last || ack.seq > last.seq) last = ack;
    }
    const bytes = await ctxd.contextBytes("big2", { minSeq: last.seq });
    assert.ok(bytes.length > 32 * MAX_PAYLOAD, `${bytes.length} bytes`);
    fetches.stop();
    const chunks = Math.ceil(bytes.length / MAX_PAYLOAD);
    // Every chunk past the first was asked for, and nothing else.
    assert.ok(fetches.length >= chunks - 1 && fetches.length <= chunks, `${fetches.length} fetches of ${chunks} chunks`);
    const printed = await ctxdCommand(["context", "big2", "--nats", srv.url]);
    assert.equal(Buffer.compare(Buffer.concat([bytes, Buffer.from("\n")]), printed), 0);
  });

  test("a session fetched turn after turn comes as deltas, put back together byte for byte", async () => {
    for (const format of [undefined, "anthropic", "gemini"]) {
      const session = `delta-${format ?? "neutral"}`;
      let last;
      for (const r of await exampleRecords()) last = await ctxd.publish(session, r);
      let held;
      for (let i = 0; i < 6; i++) {
        const call = await ctxd.publish(session, {
          role: "assistant",
          content: [{ type: "toolCall", id: `d${i}`, name: "bash", arguments: { command: `ls ${i}` } }],
        });
        last = await ctxd.publish(session, { role: "toolResult", toolCallId: `d${i}`, toolName: "bash", content: `file${i}` });
        assert.ok(call.seq < last.seq);
        const bytes = await ctxd.contextBytes(session, { minSeq: last.seq, format });
        const args = ["context", session, "--nats", srv.url];
        if (format) args.push("--format", format);
        const printed = await ctxdCommand(args);
        assert.equal(Buffer.compare(Buffer.concat([bytes, Buffer.from("\n")]), printed), 0, `${session} turn ${i}`);
        // The raw reply against the one held is a delta, of the turn's messages.
        if (held) {
          const rawBytes = await ctxd.contextBytes(session, { format, haveSeq: held.seq, haveDigest: held.digest });
          const raw = JSON.parse(td.decode(rawBytes));
          assert.ok(raw.delta.keep > 0, `${session} turn ${i}`);
          assert.ok(rawBytes.length < bytes.length / 2, `${session} turn ${i}: a delta of ${rawBytes.length} bytes for ${bytes.length}`);
        }
        held = JSON.parse(td.decode(bytes));
        assert.match(held.digest, /^[0-9a-f]{64}$/);
      }
      // Off: the whole reply, with its digest, as ctxd context prints it.
      const whole = await ctxd.contextBytes(session, { format, delta: false });
      const args = ["context", session, "--nats", srv.url];
      if (format) args.push("--format", format);
      assert.equal(Buffer.compare(Buffer.concat([whole, Buffer.from("\n")]), await ctxdCommand(args)), 0);
      assert.equal(JSON.parse(td.decode(whole)).digest, held.digest);
      // Without its digest: the reply of protocol 3.4, as ctxd context --digest=false prints it.
      const plain = await ctxd.contextBytes(session, { format, delta: false, digest: false });
      assert.equal(Buffer.compare(Buffer.concat([plain, Buffer.from("\n")]), await ctxdCommand([...args, "--digest=false"])), 0);
      const { digest: _digest, ...rest } = JSON.parse(td.decode(whole));
      assert.deepEqual(JSON.parse(td.decode(plain)), rest);
      // A digest the service does not know: the whole reply.
      const tampered = JSON.parse(td.decode(await ctxd.contextBytes(session, { format, haveSeq: held.seq, haveDigest: "0".repeat(64) })));
      assert.equal(tampered.delta, undefined);
      assert.deepEqual(tampered, held);
    }
    for (const [opts, says] of [
      [{ haveSeq: 1 }, "haveSeq and haveDigest go together"],
      [{ haveSeq: 1, haveDigest: "0".repeat(64), digest: false }, "digest false with haveSeq and haveDigest"],
      [{ haveDigest: "0".repeat(64) }, "haveSeq and haveDigest go together"],
      [{ haveSeq: -1, haveDigest: "0".repeat(64) }, "haveSeq must be"],
      [{ haveSeq: 1, haveDigest: "ABC" }, "haveDigest must be a digest of 64 lowercase hex digits"],
    ]) {
      await assert.rejects(ctxd.contextBytes("delta-neutral", opts), (err) => err instanceof BadRequestError && err.message.includes(says));
    }
  });

  test("the client keeping replies asks for the digest in so many words, as a service before 3.5 needs", async () => {
    // A listener beside the service sees each request's body.
    const seen = [];
    const sub = ctxd.nc.subscribe("ctxd.context.asks-digest", { callback: (_err, m) => seen.push(JSON.parse(td.decode(m.data))) });
    await ctxd.nc.flush();
    await ctxd.contextBytes("asks-digest");
    await ctxd.contextBytes("asks-digest");
    await ctxd.contextBytes("asks-digest", { delta: false });
    sub.unsubscribe();
    assert.equal(seen.length, 3);
    assert.equal(seen[0].digest, true, "the first asks for the digest");
    assert.equal(typeof seen[1].have_digest, "string", "the next asks against the reply held");
    assert.equal(seen[2].digest, undefined, "a plain request does not say");
  });

  test("a bad session id is refused before anything is sent, in the service's words", async () => {
    const seen = await spy(ctxd.nc, "ctxd.>");
    for (const id of ["a.b", "séance", "", "x".repeat(129), "a b"]) {
      await assert.rejects(ctxd.context(id), InvalidSessionError);
      await assert.rejects(ctxd.publish(id, { role: "user", content: "x" }), InvalidSessionError);
      if (id === "") continue; // the command line takes no empty argument the same way
      let message;
      try {
        await ctxd.context(id);
      } catch (err) {
        message = err.message;
      }
      const stderr = await ctxdFails(["context", id, "--nats", srv.url]);
      assert.ok(stderr.includes(message), `${JSON.stringify(id)}: ${stderr} does not hold ${message}`);
    }
    await ctxd.nc.flush();
    seen.stop();
    assert.deepEqual([...seen], []);
  });

  test("service errors are CtxdError with code and description", async () => {
    await assert.rejects(ctxd.context("err1", { format: "bogus" }), (err) => {
      assert.ok(err instanceof CtxdError);
      assert.equal(err.code, "400");
      assert.match(err.description, /format/);
      assert.equal(err.subject, "ctxd.context.err1");
      return true;
    });
    const { seq } = await ctxd.publish("err1", { role: "user", content: "x" });
    await assert.rejects(ctxd.context("err1", { minSeq: seq + 1000, waitMs: 100 }), (err) => {
      assert.ok(err instanceof CtxdError);
      assert.equal(err.code, "504");
      assert.ok(err.description.length > 0);
      return true;
    });
  });

  test("no responders is an error naming the subject", async () => {
    await assert.rejects(request(ctxd.nc, undefined, "ctxd.nothing.here", new Uint8Array(0), { deadline: Date.now() + 5000 }), (err) => {
      assert.ok(err instanceof NoServiceError);
      assert.equal(err.subject, "ctxd.nothing.here");
      assert.match(err.message, /ctxd\.nothing\.here/);
      return true;
    });
  });

  describe("replies that cannot be the service's", () => {
    // A responder of the test's own, on the real NATS server, answers
    // with what it is given.
    let nc;
    before(async () => {
      nc = await natsConnect({ servers: srv.url });
    });
    after(async () => {
      await nc?.close();
    });

    async function answer(subject, fn) {
      const sub = nc.subscribe(subject, { callback: (_e, m) => fn(m) });
      await nc.flush();
      return sub;
    }
    function hdrs(o) {
      const h = headers();
      for (const [k, v] of Object.entries(o)) h.set(k, v);
      return h;
    }
    const ask = (subject, ms = 5000) => request(ctxd.nc, undefined, subject, new Uint8Array(0), { deadline: Date.now() + ms });

    test("chunks pushed out of order", async () => {
      const sub = await answer("fake.order", (m) => {
        nc.publish(m.reply, te.encode("a"), { headers: hdrs({ "Ctxd-Chunks": "3", "Ctxd-Chunk": "0", "Ctxd-Reply-Bytes": "3" }) });
        nc.publish(m.reply, te.encode("c"), { headers: hdrs({ "Ctxd-Chunks": "3", "Ctxd-Chunk": "2" }) });
      });
      await assert.rejects(ask("fake.order"), (err) => err instanceof ReplyError && /chunk 2 of 3: got chunk "2"/.test(err.message));
      sub.unsubscribe();
    });

    test("a size that is not Ctxd-Reply-Bytes", async () => {
      const sub = await answer("fake.size", (m) => {
        nc.publish(m.reply, te.encode("ab"), { headers: hdrs({ "Ctxd-Chunks": "2", "Ctxd-Chunk": "0", "Ctxd-Reply-Bytes": "5" }) });
        nc.publish(m.reply, te.encode("cd"), { headers: hdrs({ "Ctxd-Chunks": "2", "Ctxd-Chunk": "1" }) });
      });
      await assert.rejects(ask("fake.size"), (err) => err instanceof ReplyError && /got 4 bytes, expected 5/.test(err.message));
      sub.unsubscribe();
      const sub2 = await answer("fake.over", (m) => {
        nc.publish(m.reply, te.encode("ab"), { headers: hdrs({ "Ctxd-Chunks": "3", "Ctxd-Chunk": "0", "Ctxd-Reply-Bytes": "3" }) });
        nc.publish(m.reply, te.encode("cd"), { headers: hdrs({ "Ctxd-Chunks": "3", "Ctxd-Chunk": "1" }) });
      });
      await assert.rejects(ask("fake.over"), (err) => err instanceof ReplyError && /more than the 3 bytes/.test(err.message));
      sub2.unsubscribe();
    });

    test("headers that are not numbers", async () => {
      for (const [name, value] of [
        ["Ctxd-Chunks", "two"],
        ["Ctxd-Chunks", "0"],
        ["Ctxd-Chunks", "-1"],
        ["Ctxd-Chunks", "99999999999999999999"],
        ["Ctxd-Reply-Bytes", "1e3"],
      ]) {
        const sub = await answer("fake.hdr", (m) => {
          const h = { "Ctxd-Chunks": "2", "Ctxd-Reply-Bytes": "2", [name]: value };
          nc.publish(m.reply, te.encode("a"), { headers: hdrs(h) });
        });
        await assert.rejects(ask("fake.hdr"), (err) => err instanceof ReplyError && err.message.includes(name), `${name}: ${value}`);
        sub.unsubscribe();
      }
    });

    test("an error in the middle of the chunks", async () => {
      const sub = await answer("fake.err", (m) => {
        nc.publish(m.reply, te.encode("a"), { headers: hdrs({ "Ctxd-Chunks": "2", "Ctxd-Chunk": "0" }) });
        nc.publish(m.reply, new Uint8Array(0), { headers: hdrs({ "Nats-Service-Error-Code": "500", "Nats-Service-Error": "boom" }) });
      });
      await assert.rejects(ask("fake.err"), (err) => err instanceof CtxdError && err.code === "500" && err.description === "boom");
      sub.unsubscribe();
    });

    test("fetched chunks: joined, and a chunk nobody holds", async () => {
      const sub = await answer("fake.fetch", (m) => {
        nc.publish(m.reply, te.encode("ab"), { headers: hdrs({ "Ctxd-Chunks": "3", "Ctxd-Reply-Bytes": "6", "Ctxd-Chunk-Subject": "fake.chunks.x" }) });
      });
      const chunks = await answer("fake.chunks.x.*", (m) => {
        const k = m.subject.split(".").at(-1);
        m.respond(te.encode(k === "1" ? "cd" : "ef"));
      });
      assert.equal(td.decode(await ask("fake.fetch")), "abcdef");
      chunks.unsubscribe();
      await nc.flush();
      await assert.rejects(ask("fake.fetch"), (err) => err instanceof NoServiceError && err.subject === "fake.chunks.x.1");
      sub.unsubscribe();
    });

    test("a pushed chunk that never comes times out, naming it", async () => {
      const sub = await answer("fake.stall", (m) => {
        nc.publish(m.reply, te.encode("a"), { headers: hdrs({ "Ctxd-Chunks": "2", "Ctxd-Chunk": "0" }) });
      });
      await assert.rejects(
        request(ctxd.nc, undefined, "fake.stall", new Uint8Array(0), { deadline: Date.now() + 5000, chunkTimeoutMs: 200 }),
        (err) => err instanceof RequestTimeoutError && /chunk 2 of 2/.test(err.message),
      );
      sub.unsubscribe();
    });

    test("any split of a body, pushed or fetched, joins to the body", async () => {
      // A deterministic generator, so that a failure repeats.
      let x = 42;
      const rand = (n) => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) % n);
      for (let round = 0; round < 40; round++) {
        const body = new Uint8Array(rand(5000));
        for (let i = 0; i < body.length; i++) body[i] = rand(256);
        const cuts = [0];
        while (cuts.at(-1) < body.length) cuts.push(Math.min(body.length, cuts.at(-1) + 1 + rand(1500)));
        if (cuts.length === 1) cuts.push(0);
        const parts = cuts.slice(1).map((end, i) => body.slice(cuts[i], end));
        const fetched = round % 2 === 1;
        const total = String(body.length);
        const sub = await answer("fake.split", (m) => {
          const h0 = { "Ctxd-Chunks": String(parts.length), "Ctxd-Reply-Bytes": total };
          if (fetched) h0["Ctxd-Chunk-Subject"] = "fake.split.chunks";
          else h0["Ctxd-Chunk"] = "0";
          nc.publish(m.reply, parts[0], { headers: hdrs(h0) });
          if (fetched) return;
          for (let k = 1; k < parts.length; k++) {
            nc.publish(m.reply, parts[k], { headers: hdrs({ "Ctxd-Chunks": String(parts.length), "Ctxd-Chunk": String(k) }) });
          }
        });
        const chunks = await answer("fake.split.chunks.*", (m) => m.respond(parts[Number(m.subject.split(".").at(-1))]));
        const got = await ask("fake.split");
        assert.equal(Buffer.compare(got, body), 0, `round ${round}: ${parts.length} parts, ${fetched ? "fetched" : "pushed"}`);
        sub.unsubscribe();
        chunks.unsubscribe();
      }
    });

    test("an abort ends the wait with its reason", async () => {
      const sub = await answer("fake.silent", () => {});
      const ac = new AbortController();
      const p = request(ctxd.nc, undefined, "fake.silent", new Uint8Array(0), { deadline: Date.now() + 60_000, signal: ac.signal });
      ac.abort(new Error("stop asking"));
      await assert.rejects(p, /stop asking/);
      sub.unsubscribe();
    });
  });

  test("close", async () => {
    const c = await connect({ servers: srv.url });
    await c.publish("close1", { role: "user", content: "x" });
    await c.close();
    assert.equal(c.nc.isClosed(), true);
    assert.equal(await c.closed(), undefined);
    await assert.rejects(c.context("close1"));
    await assert.rejects(c.publish("close1", { role: "user", content: "y" }));
    await c.close(); // twice is fine
  });
});

describe("ctxd serve --partitions 4", () => {
  let srv, ctxd;
  before(async () => {
    srv = await startCtxd(["--partitions", "4"]);
    ctxd = await connect({ servers: srv.url, partitions: "auto" });
  });
  after(async () => {
    await ctxd?.close();
    await srv?.stop();
  });

  test("partitions auto reads P from $SRV.INFO", async () => {
    assert.equal(await ctxd.partitions(), 4);
  });

  test("records are stored on the partition partition() computes", async () => {
    const { connect: natsConnect2 } = await import("@nats-io/transport-node");
    const { jetstreamManager } = await import("@nats-io/jetstream");
    const nc = await natsConnect2({ servers: srv.url });
    try {
      const jsm = await jetstreamManager(nc);
      for (const s of ["s1", "p-a", "p-b", "p-c", "p-d", "session_42"]) {
        const { seq } = await ctxd.publish(s, { role: "user", content: s });
        const m = await jsm.streams.getMessage("TRANSCRIPTS", { seq });
        assert.equal(m.subject, `transcripts.${partition(s, 4)}.${s}`);
      }
    } finally {
      await nc.close();
    }
  });

  test("a request goes to the partition's owner", async () => {
    const seen = await spy(ctxd.nc, "ctxd.p.>");
    const { seq } = await ctxd.publish("routed1", { role: "user", content: "routed" });
    const reply = await ctxd.context("routed1", { minSeq: seq });
    assert.deepEqual(reply.messages, [{ role: "user", content: "routed" }]);
    seen.stop();
    assert.deepEqual([...seen], [`ctxd.p.${partition("routed1", 4)}.routed1`]);
    const printed = await ctxdCommand(["context", "routed1", "--partitions", "4", "--nats", srv.url]);
    assert.equal(Buffer.compare(Buffer.concat([await ctxd.contextBytes("routed1"), Buffer.from("\n")]), printed), 0);
  });

  test("no owner: the request falls back to ctxd.context.<session>", async () => {
    // Routed as if the stream had 8 partitions: 4 to 7 have no owner.
    const c = await connect({ servers: srv.url, partitions: 8 });
    try {
      let session;
      for (let i = 0; !session; i++) if (partition(`fb${i}`, 8) >= 4) session = `fb${i}`;
      const seen = await spy(c.nc, "ctxd.context.>");
      const { seq } = await c.publish(session, { role: "user", content: "fallback" });
      const reply = await c.context(session, { minSeq: seq });
      assert.deepEqual(reply.messages, [{ role: "user", content: "fallback" }]);
      seen.stop();
      assert.deepEqual([...seen], [`ctxd.context.${session}`]);
    } finally {
      await c.close();
    }
  });
});

describe("ctxd serve with users (deployments/nats/auth.conf)", () => {
  let srv;
  const app = { user: "app", pass: "app-secret" };
  before(async () => {
    srv = await startCtxd(
      ["--nats-config", join(repoRoot, "deployments", "nats", "auth.conf"), "--user", "ctxd", "--inbox-prefix", "_INBOX_ctxd"],
      { CTXD_PASSWORD: "ctxd-secret", APP_PASSWORD: app.pass, OPERATOR_PASSWORD: "operator-secret" },
    );
  });
  after(async () => {
    await srv?.stop();
  });

  test("the application's user, with its inbox prefix, publishes and reads", async () => {
    const c = await connect({ servers: srv.url, ...app, inboxPrefix: "_INBOX_app" });
    try {
      const { seq } = await c.publish("auth1", { role: "user", content: "hi" });
      const reply = await c.context("auth1", { minSeq: seq });
      assert.deepEqual(reply.messages, [{ role: "user", content: "hi" }]);
    } finally {
      await c.close();
    }
  });

  test("an inbox or a subject the server refuses is an error naming it", async () => {
    const c = await connect({ servers: srv.url, ...app });
    try {
      for (const call of [() => c.context("auth1"), () => c.publish("auth1", { role: "user", content: "x" })]) {
        await assert.rejects(call(), (err) => {
          assert.ok(err instanceof PermissionError, String(err));
          assert.equal(err.operation, "subscription");
          assert.match(err.subject, /^_INBOX\./);
          assert.match(err.message, /inboxPrefix/);
          return true;
        });
      }
    } finally {
      await c.close();
    }
    // The user may not ask $SRV.INFO: partitions "auto" says so.
    await assert.rejects(connect({ servers: srv.url, ...app, inboxPrefix: "_INBOX_app", partitions: "auto" }), (err) => {
      assert.ok(err instanceof PermissionError, String(err));
      assert.equal(err.subject, "$SRV.INFO.ctxd");
      return true;
    });
    await assert.rejects(connect({ servers: srv.url, user: "app", pass: "wrong" }), /Authorization/i);
  });
});

test("connect refuses a bad partitions option before connecting", async () => {
  for (const p of [0, -1, 1.5, "4", "all"]) {
    await assert.rejects(connect({ servers: "nats://127.0.0.1:1", partitions: p }), /partitions/);
  }
});
