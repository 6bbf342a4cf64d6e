// Records (docs/CONTEXT.md) and replies (docs/PROTOCOL.md, docs/RENDER.md).
//
// Every record and block type is open: fields it does not name are kept
// by the service and passed through to the context untouched, so they
// are allowed here too ([key: string]: unknown).

/** Extra fields are carried as they are. */
export interface Open {
  [key: string]: unknown;
}

/**
 * A timestamp: Unix milliseconds (kept as it is), or an RFC 3339 string
 * (converted to Unix milliseconds in the messages ctxd builds).
 */
export type Timestamp = number | string;

// ---- content blocks ----

/** {"type":"text"} */
export interface TextBlock extends Open {
  type: "text";
  text: string;
}

/** {"type":"image"}: pi's image block, base64 data. */
export interface ImageBlock extends Open {
  type: "image";
  data: string;
  mimeType: string;
}

/** {"type":"thinking"}: the model's reasoning, passed through. */
export interface ThinkingBlock extends Open {
  type: "thinking";
  thinking: string;
}

/**
 * A tool call inside an assistant message. Its id is the first string
 * among id, toolCallId, tool_call_id. providerExecuted true: the provider
 * ran the tool itself; the call stays in the context unanswered.
 */
export interface ToolCallBlock extends Open {
  type: "toolCall" | "tool_use" | "tool_call";
  id?: string;
  toolCallId?: string;
  tool_call_id?: string;
  name: string;
  /** pi's arguments (toolCall). */
  arguments?: unknown;
  /** Anthropic's input (tool_use). */
  input?: unknown;
  providerExecuted?: boolean;
}

/** The Anthropic shape of a tool result: a block inside a user message. */
export interface ToolResultBlock extends Open {
  type: "tool_result";
  tool_use_id: string;
  content?: string | ContentBlock[];
  is_error?: boolean;
}

/** Any content block; unknown block types pass through. */
export type ContentBlock = TextBlock | ImageBlock | ThinkingBlock | ToolCallBlock | ToolResultBlock | (Open & { type: string });

/** An entry of the OpenAI-style tool_calls array of an assistant message. */
export interface OpenAIToolCall extends Open {
  id: string;
  type?: "function";
  function: { name: string; arguments?: string } & Open;
  providerExecuted?: boolean;
}

// ---- message records (they enter the context) ----

/** A user's message. */
export interface UserRecord extends Open {
  role: "user";
  content: string | ContentBlock[];
  timestamp?: Timestamp;
}

/** The assistant's message: text, thinking and tool calls. */
export interface AssistantRecord extends Open {
  role: "assistant";
  content?: string | ContentBlock[] | null;
  /** The OpenAI-style calls. */
  tool_calls?: OpenAIToolCall[];
  timestamp?: Timestamp;
}

/** A system prompt. */
export interface SystemRecord extends Open {
  role: "system";
  content: string | ContentBlock[];
}

/** A tool's result (pi's shape). */
export interface ToolResultRecord extends Open {
  role: "toolResult";
  toolCallId: string;
  toolName?: string;
  content: string | ContentBlock[];
  isError?: boolean;
  timestamp?: Timestamp;
}

/** A tool's result (OpenAI's shape). */
export interface ToolRecord extends Open {
  role: "tool";
  tool_call_id: string;
  content: string | ContentBlock[];
}

/**
 * A local shell run: becomes a user message
 * "<local_shell>\n$ COMMAND\nexit=CODE\noutput:\nOUTPUT\n</local_shell>",
 * or nothing when excluded or its command is blank.
 */
export interface BashExecutionRecord extends Open {
  role: "bashExecution";
  command: string;
  output?: string | ContentBlock[];
  exitCode?: number | null;
  signal?: string;
  truncated?: boolean;
  excludeFromContext?: boolean;
  excludedFromContext?: boolean;
  timestamp?: Timestamp;
}

/** The fields of an extension's message. */
export interface CustomMessageFields extends Open {
  customType?: string;
  content: string | ContentBlock[];
  /** Ignored: hidden in the UI is not excluded from the model. */
  display?: boolean;
  /** A map whose role "assistant" makes the message the assistant's. */
  details?: unknown;
  timestamp?: Timestamp;
}

/**
 * An extension's message (role "custom", or type "custom_message"): a
 * user message, or an assistant one when details.role is "assistant".
 * customType, display and details are not copied into the context.
 */
export type CustomMessageRecord = (CustomMessageFields & { role: "custom" }) | (CustomMessageFields & { type: "custom_message" });

/** Any record that carries a role the context takes. */
export type MessageRecord =
  | UserRecord
  | AssistantRecord
  | SystemRecord
  | ToolResultRecord
  | ToolRecord
  | BashExecutionRecord
  | CustomMessageRecord;

// ---- compaction ----

/**
 * A compaction checkpoint. When valid (every field below of its type;
 * handover and audit maps when present) it replaces everything before it
 * with its messages, each converted by the same rules.
 */
export interface CompactionRecord extends Open {
  type: "compaction";
  at: string;
  baseSeq: number;
  plannerVersion: number;
  summaryModelRef: string;
  summary: string;
  qualityAudit: "passed" | "disabled";
  messages: TranscriptRecord[];
  firstKeptIndex: number;
  tokensBefore: number;
  tokensAfter: number;
  handover?: Open;
  audit?: Open;
  restoredFromCompactionId?: string;
}

// ---- metadata entries (kept in the stream, out of the context) ----

/** A UI label on another entry. */
export interface LabelEntry extends Open {
  type: "label";
  targetId?: string;
  label?: string;
}

/** The session switched models. */
export interface ModelChangeEntry extends Open {
  type: "model_change";
  provider?: string;
  modelId?: string;
}

/** The session changed its thinking level. */
export interface ThinkingLevelChangeEntry extends Open {
  type: "thinking_level_change";
  thinkingLevel?: string;
}

/** The session's name and such. */
export interface SessionInfoEntry extends Open {
  type: "session_info";
  name?: string;
}

/** An extension's own state. */
export interface CustomEntry extends Open {
  type: "custom";
  customType?: string;
  data?: unknown;
}

/** A context row: dropped. */
export interface ContextEntry extends Open {
  kind: "context";
}

/** Display records of summaries: they never change the context. */
export interface SummaryEntry extends Open {
  role: "compactionSummary" | "branchSummary";
}

/** Any entry without a role the context takes. */
export type MetadataEntry =
  | LabelEntry
  | ModelChangeEntry
  | ThinkingLevelChangeEntry
  | SessionInfoEntry
  | CustomEntry
  | ContextEntry
  | SummaryEntry;

/** A record published to transcripts.<session>. */
export type TranscriptRecord = MessageRecord | CompactionRecord | MetadataEntry;

// ---- replies ----

/** A message of the neutral context (docs/CONTEXT.md), fields as stored. */
export interface ContextMessage extends Open {
  role: "user" | "assistant" | "system" | "tool" | "toolResult";
  content?: unknown;
  /** Unix milliseconds in the messages ctxd builds; as stored in the others. */
  timestamp?: Timestamp;
}

/** What the passes removed (docs/CONTEXT.md section 6). */
export interface Dropped {
  unpaired_calls?: { id: string; tool: string; seq: number }[];
  orphan_results?: { id: string; seq: number }[];
  images_omitted?: number;
}

/** Estimated size of the body (docs/RENDER.md section 7). */
export interface Usage {
  bytes: number;
  images: number;
  input_tokens: number;
}

/** Whether the context is over budget_tokens, and where a compaction may cut. */
export interface Budget {
  tokens: number;
  over: boolean;
  /** Only when over: the latest record before which a compaction keeps every call with its result (0: none). */
  compact_before_seq?: number;
}

/** One change the rendering made (docs/RENDER.md section 6). */
export interface RenderChange extends Open {
  change: string;
  message?: number;
  block?: number;
  seq?: number;
  id?: string;
  to?: string;
  into?: number;
  reason?: string;
}

/** The report of what the rendering changed. */
export interface RenderReport extends Open {
  changes: RenderChange[];
  ends_with_assistant: boolean;
  /** Anthropic only; null without blocks. */
  cache_breakpoint?: { message: number; block: number } | null;
}

/** The formats a context is rendered in. */
export type Format = "neutral" | "anthropic" | "openai-chat" | "openai-responses" | "gemini";

/**
 * Context edits applied before rendering (docs/EDITS.md): the request's
 * edits field. Every count and token figure is a whole number of at least 0.
 */
export interface Edits {
  /** Clear the content of old tool results once the context is over trigger_tokens. */
  tool_results?: {
    /** Default: the request's budgetTokens; one of the two is required. */
    trigger_tokens?: number;
    /** The most recent results left whole (default 3). */
    keep?: number;
    /** The step of what is cleared, so that the body holds between steps (default 0). */
    clear_at_least_tokens?: number;
    /** Tools whose results are never cleared. */
    exclude_tools?: string[];
    /** Replace the cleared results' call arguments by {} too (default false). */
    clear_inputs?: boolean;
  };
  /** Remove the thinking of assistant messages before the last keep_turns (default 1). */
  thinking?: { keep_turns?: number };
  /** Replace images beyond the keep most recent (default 3) by a notice, batch at a time (default 10). */
  images?: { keep?: number; batch?: number };
}

/** What the edits changed: the reply's edits field. */
export interface EditsReport {
  tool_results_cleared: { id: string; tool: string; seq: number; tokens: number }[];
  thinking_removed: { seq: number; message: number; block: number }[];
  images_removed: { seq: number; message: number; block: number }[];
  tokens_before: number;
  tokens_after: number;
}

/** The fields every reply has. */
export interface ReplyBase {
  session: string;
  /** The stream sequence of the session's last record in the reply. */
  seq: number;
  dropped?: Dropped;
  /** With a format, or with budgetTokens. */
  usage?: Usage;
  /** When the request had budgetTokens. */
  budget?: Budget;
  /** When the request had edits: what they changed; usage is then the edited body's. */
  edits?: EditsReport;
  /** The digest of the reply's messages (docs/PROTOCOL.md, "Delta replies"): asked for, or kept by the client. */
  digest?: string;
  /** In a raw reply to haveSeq and haveDigest: the reply holds the messages from keep on. */
  delta?: { keep: number };
}

/** The neutral context. */
export interface NeutralReply extends ReplyBase {
  messages: ContextMessage[];
}

/** The fields every rendered reply has. */
export interface RenderedReply<F extends Exclude<Format, "neutral">> extends ReplyBase {
  format: F;
  render: RenderReport;
  usage: Usage;
}

/** Anthropic Messages: system (only if any) and messages. */
export interface AnthropicReply extends RenderedReply<"anthropic"> {
  system?: unknown;
  messages: unknown[];
}

/** OpenAI Chat Completions: messages. */
export interface OpenAIChatReply extends RenderedReply<"openai-chat"> {
  messages: unknown[];
}

/** OpenAI Responses: input. */
export interface OpenAIResponsesReply extends RenderedReply<"openai-responses"> {
  input: unknown[];
}

/** Gemini: systemInstruction (only if any) and contents. */
export interface GeminiReply extends RenderedReply<"gemini"> {
  systemInstruction?: unknown;
  contents: unknown[];
}

/** The reply for a format. */
export type ReplyFor<F extends Format | undefined> = F extends "anthropic"
  ? AnthropicReply
  : F extends "openai-chat"
    ? OpenAIChatReply
    : F extends "openai-responses"
      ? OpenAIResponsesReply
      : F extends "gemini"
        ? GeminiReply
        : NeutralReply;

/** Any reply. */
export type ContextReply = NeutralReply | AnthropicReply | OpenAIChatReply | OpenAIResponsesReply | GeminiReply;
