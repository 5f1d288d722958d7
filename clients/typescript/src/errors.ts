// What a call throws: a problem the server answered (ForklogError, one subclass per code), or no answer at all
// (ConnectionError). A code this version does not know throws ForklogError itself, with the whole body.
import type { components } from "./schema.js";

type Schemas = components["schemas"];

/** A problem body (RFC 9457) as the server sends it: the members every problem has, and the facts of its code. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  instance?: string;
  [fact: string]: unknown;
}

/** The document's schema of a code's problem, when the document declares it; else the general shape. */
type ProblemOf<Name extends string> = Name extends keyof Schemas ? Schemas[Name] & Problem : Problem;

/** The server answered a problem: `code` is stable, `detail` is for people, `problem` is the whole body. */
export class ForklogError extends Error {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly problem: Problem;

  constructor(status: number, problem: Problem) {
    const code = typeof problem.code === "string" ? problem.code : "";
    const detail = typeof problem.detail === "string" ? problem.detail : "";
    super(detail ? `${status} ${code || "error"}: ${detail}` : `${status} ${code}`);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.problem = problem;
  }
}

/**
 * The server could not be reached, or its answers were lost, as many times as the retries allowed: a change may or
 * may not have taken effect; calling again with the same `idempotencyKey` applies it at most once.
 */
export class ConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ConnectionError";
  }
}

/** SESSION_NOT_FOUND: Session not found. */
export class SessionNotFoundError extends ForklogError {
  declare readonly problem: ProblemOf<"SessionNotFoundProblem">;
}

/** SESSION_ALREADY_EXISTS: Session already exists. */
export class SessionAlreadyExistsError extends ForklogError {
  declare readonly problem: ProblemOf<"SessionAlreadyExistsProblem">;
}

/** SESSION_NOT_LIVE: Not the live session instance. */
export class SessionNotLiveError extends ForklogError {
  declare readonly problem: ProblemOf<"SessionNotLiveProblem">;
}

/** NOT_AT_TURN_BOUNDARY: Not at a turn boundary. */
export class NotAtTurnBoundaryError extends ForklogError {
  declare readonly problem: ProblemOf<"NotAtTurnBoundaryProblem">;
}

/** SEQ_CONFLICT: Sequence conflict. */
export class SeqConflictError extends ForklogError {
  declare readonly problem: ProblemOf<"SeqConflictProblem">;
}

/** INVALID_BOUNDARY: Invalid boundary. */
export class InvalidBoundaryError extends ForklogError {
  declare readonly problem: ProblemOf<"InvalidBoundaryProblem">;
}

/** INVALID_SEED: Invalid seed. */
export class InvalidSeedError extends ForklogError {
  declare readonly problem: ProblemOf<"InvalidSeedProblem">;
}

/** INVALID_EVENT: Invalid event. */
export class InvalidEventError extends ForklogError {
  declare readonly problem: ProblemOf<"InvalidEventProblem">;
}

/** INVALID_REQUEST: Invalid request. */
export class InvalidRequestError extends ForklogError {
  declare readonly problem: ProblemOf<"InvalidRequestProblem">;
}

/** UNAUTHENTICATED: Unauthenticated. */
export class UnauthenticatedError extends ForklogError {
  declare readonly problem: ProblemOf<"UnauthenticatedProblem">;
}

/** FORBIDDEN: Forbidden. */
export class ForbiddenError extends ForklogError {
  declare readonly problem: ProblemOf<"ForbiddenProblem">;
}

/** IDEMPOTENCY_KEY_IN_PROGRESS: Idempotency key in progress. */
export class IdempotencyKeyInProgressError extends ForklogError {
  declare readonly problem: ProblemOf<"IdempotencyKeyInProgressProblem">;
}

/** IDEMPOTENCY_KEY_REUSED: Idempotency key reused. */
export class IdempotencyKeyReusedError extends ForklogError {
  declare readonly problem: ProblemOf<"IdempotencyKeyReusedProblem">;
}

/** NOT_FOUND. */
export class NotFoundError extends ForklogError {
  declare readonly problem: ProblemOf<"NotFoundProblem">;
}

/** METHOD_NOT_ALLOWED. */
export class MethodNotAllowedError extends ForklogError {
  declare readonly problem: ProblemOf<"MethodNotAllowedProblem">;
}

/** REQUEST_TIMEOUT: Request timeout. */
export class RequestTimeoutError extends ForklogError {
  declare readonly problem: ProblemOf<"RequestTimeoutProblem">;
}

/** PAYLOAD_TOO_LARGE: Payload too large. */
export class PayloadTooLargeError extends ForklogError {
  declare readonly problem: ProblemOf<"PayloadTooLargeProblem">;
}

/** UNSUPPORTED_MEDIA_TYPE: Unsupported media type. */
export class UnsupportedMediaTypeError extends ForklogError {
  declare readonly problem: ProblemOf<"UnsupportedMediaTypeProblem">;
}

/** HEADERS_TOO_LARGE: Request headers too large. */
export class HeadersTooLargeError extends ForklogError {
  declare readonly problem: ProblemOf<"HeadersTooLargeProblem">;
}

/** NOT_READY: Not ready. */
export class NotReadyError extends ForklogError {
  declare readonly problem: ProblemOf<"NotReadyProblem">;
}

/** STORAGE_UNAVAILABLE: Storage unavailable. */
export class StorageUnavailableError extends ForklogError {
  declare readonly problem: ProblemOf<"StorageUnavailableProblem">;
}

/** SESSION_CORRUPT: Session corrupt. */
export class SessionCorruptError extends ForklogError {
  declare readonly problem: ProblemOf<"SessionCorruptProblem">;
}

/** INTERNAL: Internal error. */
export class InternalError extends ForklogError {
  declare readonly problem: ProblemOf<"InternalProblem">;
}

/** QUOTA_EXCEEDED. */
export class QuotaExceededError extends ForklogError {
  declare readonly problem: ProblemOf<"QuotaExceededProblem">;
}

/** RATE_LIMITED. */
export class RateLimitedError extends ForklogError {
  declare readonly problem: ProblemOf<"RateLimitedProblem">;
}

/** NOT_IN_TURN: an interrupt of a session with no open turn (`lastTurnEndSeq`). */
export class NotInTurnError extends ForklogError {
  declare readonly problem: ProblemOf<"NotInTurnProblem">;
}

const BY_CODE: Record<string, new (status: number, problem: Problem) => ForklogError> = {
  SESSION_NOT_FOUND: SessionNotFoundError,
  SESSION_ALREADY_EXISTS: SessionAlreadyExistsError,
  SESSION_NOT_LIVE: SessionNotLiveError,
  NOT_AT_TURN_BOUNDARY: NotAtTurnBoundaryError,
  SEQ_CONFLICT: SeqConflictError,
  INVALID_BOUNDARY: InvalidBoundaryError,
  INVALID_SEED: InvalidSeedError,
  INVALID_EVENT: InvalidEventError,
  INVALID_REQUEST: InvalidRequestError,
  UNAUTHENTICATED: UnauthenticatedError,
  FORBIDDEN: ForbiddenError,
  IDEMPOTENCY_KEY_IN_PROGRESS: IdempotencyKeyInProgressError,
  IDEMPOTENCY_KEY_REUSED: IdempotencyKeyReusedError,
  NOT_FOUND: NotFoundError,
  METHOD_NOT_ALLOWED: MethodNotAllowedError,
  REQUEST_TIMEOUT: RequestTimeoutError,
  PAYLOAD_TOO_LARGE: PayloadTooLargeError,
  UNSUPPORTED_MEDIA_TYPE: UnsupportedMediaTypeError,
  HEADERS_TOO_LARGE: HeadersTooLargeError,
  NOT_READY: NotReadyError,
  STORAGE_UNAVAILABLE: StorageUnavailableError,
  SESSION_CORRUPT: SessionCorruptError,
  INTERNAL: InternalError,
  QUOTA_EXCEEDED: QuotaExceededError,
  RATE_LIMITED: RateLimitedError,
  NOT_IN_TURN: NotInTurnError,
};

/** The error of a problem answer: its code's class, or ForklogError for a code not known here. */
export function errorFor(status: number, problem: Problem): ForklogError {
  const known = typeof problem.code === "string" ? BY_CODE[problem.code] : undefined;
  return known ? new known(status, problem) : new ForklogError(status, problem);
}
