// When a call is tried again, and how long it waits first (spec 15, "Retries"): the same rules as the Python
// client. Retried: a connection error or timeout, 408, 429, 502, 503, 504 and 409 IDEMPOTENCY_KEY_IN_PROGRESS;
// never another 4xx, never 500. The wait doubles from 0.5 s up to 8 s with 25 % of jitter, or is the answer's
// Retry-After when it sends one (up to 60 s; a longer one is not waited for).
import type { Problem } from "./errors.js";

/** The backoff's bounds in milliseconds (the tests shorten the first wait; nothing else should change them). */
export const timing = { firstWaitMs: 500, lastWaitMs: 8000, jitter: 0.25, maxRetryAfterMs: 60_000 };

const RETRIED_STATUSES = new Set([408, 429, 502, 503, 504]);

export function retryableAnswer(status: number, problem: Problem): boolean {
  return RETRIED_STATUSES.has(status) || (status === 409 && problem.code === "IDEMPOTENCY_KEY_IN_PROGRESS");
}

/** The wait before retry number `retry` (0 for the first), in milliseconds. */
export function backoff(retry: number): number {
  const base = Math.min(timing.lastWaitMs, timing.firstWaitMs * 2 ** retry);
  if (base * (1 + timing.jitter) <= timing.lastWaitMs) return base * (1 + timing.jitter * Math.random());
  return timing.lastWaitMs * (1 - timing.jitter * Math.random());
}

/** The wait an answer asks for, in milliseconds: Retry-After in seconds or as a date, else a retryAfterMs fact. */
export function retryAfter(headers: Headers, problem: Problem): number | undefined {
  const header = headers.get("retry-after")?.trim();
  if (header) {
    if (/^\d+$/.test(header)) return Number(header) * 1000;
    const when = Date.parse(header);
    if (!Number.isNaN(when)) return Math.max(0, when - Date.now());
  }
  const fact = problem.retryAfterMs;
  return typeof fact === "number" && fact >= 0 ? fact : undefined;
}

/** How long to wait before trying an answer again, or undefined when the answer is final. */
export function answerWait(status: number, headers: Headers, problem: Problem, attempt: number): number | undefined {
  if (!retryableAnswer(status, problem)) return undefined;
  const asked = retryAfter(headers, problem);
  if (asked === undefined) return backoff(attempt);
  return asked <= timing.maxRetryAfterMs ? asked : undefined;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
