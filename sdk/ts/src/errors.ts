// Errors raised by the Warden SDK: every error the daemon reports becomes an APIError, or the
// subclass for its stable error code.

import { ERROR_STATUS } from "./types.js";

/** Base class of every error the SDK throws. */
export class WardenError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The daemon could not be reached, or the connection broke. */
export class ConnectionError extends WardenError {}

/** A stream ended without its final event, or carried a malformed line. */
export class StreamError extends WardenError {}

export interface APIErrorInit {
  status?: number;
  code?: string;
  requestId?: string;
  body?: unknown;
  retryAfter?: number | null;
}

/**
 * An error response of the Warden API, or an `error` event inside a stream. `status` is the
 * HTTP status (0 inside a stream), `code` the stable error code ("" when the response had no
 * Warden error body), `requestId` the ID of the daemon's log lines.
 */
export class APIError extends WardenError {
  readonly status: number;
  readonly code: string;
  readonly requestId: string;
  readonly body: unknown;
  /** The explanation alone, without the code and status. */
  readonly detail: string;
  constructor(message: string, init: APIErrorInit = {}) {
    const head = init.code || `http ${init.status ?? 0}`;
    const extra = [init.status ? `http ${init.status}` : "", init.requestId ? `request ${init.requestId}` : ""].filter(Boolean);
    super(`${head}: ${message}${init.code && extra.length ? ` (${extra.join(", ")})` : ""}`);
    this.status = init.status ?? 0;
    this.code = init.code ?? "";
    this.requestId = init.requestId ?? "";
    this.body = init.body;
    this.detail = message;
  }
}

/** bad_request or invalid_json (400). */
export class BadRequestError extends APIError {}
/** validation_failed (422). */
export class ValidationError extends APIError {}
/** unauthenticated (401). */
export class AuthError extends APIError {}
/** forbidden (403): a missing scope, another principal's object, or a governance denial. */
export class ForbiddenError extends APIError {}
/** permission_denied (403): the sandbox's own file or program permissions refused it. */
export class PermissionDeniedError extends APIError {}
/** approval_required (403): held until approved; `approvalId` names the approval. */
export class ApprovalRequiredError extends ForbiddenError {
  get approvalId(): string {
    return (this.body as { error?: { approval_id?: string } } | undefined)?.error?.approval_id ?? "";
  }
}
/** not_found (404). */
export class NotFoundError extends APIError {}
/** conflict (409): the object is in the wrong state. */
export class ConflictError extends APIError {}
/** payload_too_large (413). */
export class PayloadTooLargeError extends APIError {}
/** rate_limited (429); `retryAfter` is the wait in seconds the daemon asked for, or null. */
export class RateLimitedError extends APIError {
  readonly retryAfter: number | null;
  constructor(message: string, init: APIErrorInit = {}) {
    super(message, init);
    this.retryAfter = init.retryAfter ?? null;
  }
}
/** unavailable (503). */
export class UnavailableError extends APIError {
  readonly retryAfter: number | null;
  constructor(message: string, init: APIErrorInit = {}) {
    super(message, init);
    this.retryAfter = init.retryAfter ?? null;
  }
}
/** internal (500). */
export class InternalError extends APIError {}
/** timeout (504): the sandbox's agent or backend did not answer in time. */
export class GatewayTimeoutError extends APIError {}
/** bad_gateway (502). */
export class BadGatewayError extends APIError {}

type Ctor = new (message: string, init?: APIErrorInit) => APIError;

export const ERROR_CLASSES: Readonly<Record<string, Ctor>> = {
  bad_request: BadRequestError,
  invalid_json: BadRequestError,
  validation_failed: ValidationError,
  unauthenticated: AuthError,
  forbidden: ForbiddenError,
  permission_denied: PermissionDeniedError,
  approval_required: ApprovalRequiredError,
  not_found: NotFoundError,
  conflict: ConflictError,
  payload_too_large: PayloadTooLargeError,
  rate_limited: RateLimitedError,
  unavailable: UnavailableError,
  internal: InternalError,
  timeout: GatewayTimeoutError,
  bad_gateway: BadGatewayError,
};

const BY_STATUS: Readonly<Record<number, Ctor>> = {
  400: BadRequestError, 401: AuthError, 403: ForbiddenError, 404: NotFoundError, 409: ConflictError,
  413: PayloadTooLargeError, 422: ValidationError, 429: RateLimitedError, 500: InternalError,
  502: BadGatewayError, 503: UnavailableError, 504: GatewayTimeoutError,
};

for (const code of Object.keys(ERROR_STATUS)) {
  if (!(code in ERROR_CLASSES)) throw new Error(`@warden/sdk: no error class for code ${code}`);
}

/** Reads a Retry-After header: delay-seconds or an HTTP date; null when absent or bad. */
export function parseRetryAfter(v: string | null | undefined, now = Date.now()): number | null {
  if (!v) return null;
  const s = v.trim();
  if (/^\d+$/.test(s)) return Number(s);
  const t = Date.parse(s);
  return Number.isNaN(t) ? null : Math.max((t - now) / 1000, 0);
}

/** Builds the error for an error response. */
export function errorFromResponse(status: number, headers: Headers, text: string): APIError {
  let code = "";
  let message = "";
  let requestId = headers.get("x-request-id") ?? "";
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const err = (body as { error?: { code?: string; message?: string; request_id?: string } } | undefined)?.error;
  if (err && typeof err === "object" && err.code) {
    code = String(err.code);
    message = String(err.message ?? "");
    requestId = err.request_id || requestId;
  } else {
    body = undefined;
    const t = text.trim();
    message = t.length > 0 && t.length <= 512 ? t : `http status ${status}`;
  }
  const C = ERROR_CLASSES[code] ?? BY_STATUS[status] ?? APIError;
  return new C(message, { status, code, requestId, body, retryAfter: parseRetryAfter(headers.get("retry-after")) });
}

/** Builds the error for an `error` event inside a stream. */
export function errorFromEvent(ev: { code?: string; message?: string }): APIError {
  const code = String(ev.code ?? "");
  const C = ERROR_CLASSES[code] ?? APIError;
  return new C(String(ev.message ?? ""), { code, body: { error: ev } });
}
