// @ctxd/client: publish agent transcript records to ctxd and fetch
// model-ready contexts, over NATS. The wire is ctxd's docs/PROTOCOL.md.

export { connect, Ctxd, readPartitions, requestBody } from "./client.js";
export type { ConnectOptions, ContextOptions, PublishAck, PublishOptions } from "./client.js";
export {
  BadRequestError,
  CtxdError,
  InvalidSessionError,
  NoServiceError,
  PermissionError,
  ReplyError,
  RequestTimeoutError,
} from "./errors.js";
export { apply, hold } from "./delta.js";
export type { Held } from "./delta.js";
export { request, timeoutOf } from "./request.js";
export type { Wait } from "./request.js";
export {
  checkSession,
  contextSubject,
  CONTEXT_PREFIX,
  MAX_SESSION_LEN,
  partition,
  PARTITION_PREFIX,
  partitionSubject,
  transcriptSubject,
  TRANSCRIPTS_PREFIX,
} from "./subject.js";
export type * from "./types.js";
