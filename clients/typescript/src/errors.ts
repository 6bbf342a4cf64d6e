// The errors the client throws. Match them with instanceof, never by
// their text.

/**
 * CtxdError is an error reply of the service: the NATS service error
 * headers Nats-Service-Error-Code and Nats-Service-Error. The codes are
 * docs/PROTOCOL.md's: "400" a bad session id or request field (the
 * description names it), "404" a chunk not held (request the context
 * again), "503" a protective bound reached (retry after a pause), "504"
 * min_seq not reached or the reads not done in time, "500" anything else.
 */
export class CtxdError extends Error {
  /** The error code, as the service sent it: "400", "404", "500", "503", "504". */
  readonly code: string;
  /** The service's description of the error. */
  readonly description: string;
  /** The subject the request was sent to. */
  readonly subject: string;

  constructor(code: string, description: string, subject: string) {
    super(`${code} ${description}`);
    this.name = "CtxdError";
    this.code = code;
    this.description = description;
    this.subject = subject;
  }
}

/**
 * NoServiceError: nothing answers on the subject (NATS "no responders"):
 * no ctxd serve runs, or none that this connection's account reaches.
 */
export class NoServiceError extends Error {
  /** The subject nothing answers on. */
  readonly subject: string;

  constructor(subject: string, options?: ErrorOptions) {
    super(`no ctxd service answers on ${subject} (is ctxd serve running?)`, options);
    this.name = "NoServiceError";
    this.subject = subject;
  }
}

/** RequestTimeoutError: no answer (or no next chunk) came in time. */
export class RequestTimeoutError extends Error {
  /** The subject the request was sent to. */
  readonly subject: string;

  constructor(subject: string, message: string, options?: ErrorOptions) {
    super(`request ${subject}: ${message}`, options);
    this.name = "RequestTimeoutError";
    this.subject = subject;
  }
}

/**
 * ReplyError: a reply that cannot be what the service sends (chunks out
 * of order, a size that does not match Ctxd-Reply-Bytes, a header that is
 * not a number, a body that is not JSON). Nothing of it is returned.
 */
export class ReplyError extends Error {
  /** The subject the request was sent to. */
  readonly subject: string;

  constructor(subject: string, message: string, options?: ErrorOptions) {
    super(`reply to ${subject}: ${message}`, options);
    this.name = "ReplyError";
    this.subject = subject;
  }
}

/**
 * InvalidSessionError: a session id refused before anything is sent. Its
 * message is the service's and the Go client's: the first character not
 * allowed, and its position in characters.
 */
export class InvalidSessionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InvalidSessionError";
  }
}

/** BadRequestError: an option refused before anything is sent, named. */
export class BadRequestError extends Error {
  constructor(message: string) {
    super(`bad context request: ${message}`);
    this.name = "BadRequestError";
  }
}

/**
 * PermissionError: the NATS server refuses this connection a subject it
 * needs. operation "subscription": the connection's inbox, where every
 * reply comes (connect with the inboxPrefix the user may subscribe to);
 * "publish": the request's subject.
 */
export class PermissionError extends Error {
  /** What the server refused: "publish" or "subscription". */
  readonly operation: string;
  /** The subject refused. */
  readonly subject: string;

  constructor(operation: string, subject: string, hint: string, options?: ErrorOptions) {
    super(`the NATS server refuses this connection's ${operation === "subscription" ? "subscription to" : "publish to"} ${subject}${hint ? ` (${hint})` : ""}`, options);
    this.name = "PermissionError";
    this.operation = operation;
    this.subject = subject;
  }
}

/** permissionError turns nats.js's permission violation, if err is or wraps one, into a PermissionError. */
export function permissionError(err: unknown, publishHint = ""): PermissionError | undefined {
  let e: unknown = err;
  for (let i = 0; i < 3 && e instanceof Error; i++, e = e.cause) {
    if (e.name === "PermissionViolationError" || (e as { operation?: unknown }).operation !== undefined) {
      const { operation, subject } = e as unknown as { operation: string; subject: string };
      if (typeof operation === "string" && typeof subject === "string") {
        const hint = operation === "subscription" ? "connect with the inboxPrefix the user may subscribe to" : publishHint;
        return new PermissionError(operation, subject, hint, { cause: err });
      }
    }
  }
  return undefined;
}
