// Compiled, never run (npm test type-checks it): the calls of the
// README compile against the built declarations, and the replies have
// the types of their format.

import { connect, CtxdError } from "../dist/index.js";
import type { AnthropicReply, Edits, Format, NeutralReply, TranscriptRecord } from "../dist/index.js";

export async function turn(record: TranscriptRecord, msgId: string, waitMs: number, format: Format, budgetTokens: number, edits: Edits) {
  const ctxd = await connect({ servers: "nats://127.0.0.1:4222", user: "u", pass: "p", partitions: "auto" });
  const { seq } = await ctxd.publish("s1", record, { msgId });
  const reply = await ctxd.context("s1", { minSeq: seq, waitMs, format, budgetTokens, edits });
  const session: string = reply.session;
  const n: number = reply.seq;

  const neutral: NeutralReply = await ctxd.context("s1", { minSeq: seq });
  const role: string = neutral.messages[0].role;
  const anthropic: AnthropicReply = await ctxd.context("s1", { format: "anthropic" });
  const body: unknown[] = anthropic.messages;
  const tokens: number = anthropic.usage.input_tokens;
  const gemini = await ctxd.context("s1", { format: "gemini" });
  const contents: unknown[] = gemini.contents;
  try {
    await ctxd.context("s1", { minSeq: seq + 1000, waitMs: 100 });
  } catch (err) {
    if (err instanceof CtxdError && err.code === "504") console.log(err.description);
  }
  await ctxd.close();
  return { session, n, role, body, tokens, contents };
}

const records: TranscriptRecord[] = [
  { role: "user", content: "The login button does nothing.", timestamp: 1764493200000 },
  { role: "assistant", content: [{ type: "toolCall", id: "b2", name: "browser_use", arguments: { action: "click" } }] },
  { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "bash", arguments: "{}" } }] },
  { role: "toolResult", toolCallId: "b2", toolName: "browser_use", content: [{ type: "image", data: "iVBOR", mimeType: "image/png" }] },
  { role: "tool", tool_call_id: "c1", content: "ok" },
  { role: "bashExecution", command: "git status --short", output: " M src/login.tsx\n", exitCode: 0 },
  { role: "custom", customType: "voice_omni_transcript", content: "We can prepare tomorrow", details: { role: "assistant" } },
  { type: "custom_message", customType: "note", content: [{ type: "text", text: "from an extension" }], display: false },
  { type: "label", targetId: "b2", label: "bug reproduced" },
  { type: "model_change", provider: "anthropic", modelId: "claude-sonnet" },
  {
    type: "compaction", at: "2025-11-30T09:00:00Z", baseSeq: 4, plannerVersion: 1, summaryModelRef: "m", summary: "s",
    qualityAudit: "passed", messages: [{ role: "user", content: "summary" }], firstKeptIndex: 0, tokensBefore: 10, tokensAfter: 2,
  },
];
export { records };

// The README's loop, with the provider call and the tools declared.
type Block = { type: "text"; text: string } | { type: "tool_use"; id: string; name: string; input: unknown };
declare function callModel(system: unknown, messages: unknown[]): Promise<{ content: Block[] }>;
declare function runTool(call: { id: string; name: string; input: unknown }): Promise<{ type: "text"; text: string }[]>;

export async function loop(session: string, task: string) {
  const ctxd = await connect({ servers: "nats://127.0.0.1:4222" });
  let { seq } = await ctxd.publish(session, { role: "user", content: task, timestamp: Date.now() });
  for (;;) {
    const body = await ctxd.context(session, { minSeq: seq, format: "anthropic" });
    const reply = await callModel(body.system, body.messages); // your provider call: Anthropic's content blocks back
    ({ seq } = await ctxd.publish(session, { role: "assistant", content: reply.content, timestamp: Date.now() }));
    const calls = reply.content.filter((b) => b.type === "tool_use");
    if (calls.length === 0) break;
    for (const c of calls) ({ seq } = await ctxd.publish(session, { role: "toolResult", toolCallId: c.id, toolName: c.name, content: await runTool(c) }));
  }
  await ctxd.close();
}
