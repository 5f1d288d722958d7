// The retry policy's numbers (spec 15): which answers are retried, and how long the waits are.
import assert from "node:assert/strict";
import { test } from "node:test";

import { backoff, retryAfter, retryableAnswer } from "../dist/retry.js";

test("the backoff doubles from half a second to eight, with jitter", () => {
  for (let retry = 0; retry < 7; retry += 1) {
    const waits = Array.from({ length: 200 }, () => backoff(retry));
    const [low, high] = retry < 4 ? [500 * 2 ** retry, 500 * 2 ** retry * 1.25] : [6000, 8000];
    assert.ok(Math.min(...waits) >= low && Math.max(...waits) <= high, `retry ${retry}`);
    assert.ok(new Set(waits).size > 100);
  }
});

test("what is retried", () => {
  for (const [status, code] of [[408], [429, "RATE_LIMITED"], [503, "NOT_READY"], [409, "IDEMPOTENCY_KEY_IN_PROGRESS"]]) {
    assert.equal(retryableAnswer(status, { code }), true, `${status} ${code}`);
  }
  for (const [status, code] of [[409, "SEQ_CONFLICT"], [404, "SESSION_NOT_FOUND"], [422, "INVALID_EVENT"], [500]]) {
    assert.equal(retryableAnswer(status, { code }), false, `${status} ${code}`);
  }
});

test("Retry-After in seconds, as a date, or as the problem's fact", () => {
  assert.equal(retryAfter(new Headers({ "Retry-After": "3" }), {}), 3000);
  assert.equal(retryAfter(new Headers({ "Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT" }), {}), 0);
  assert.equal(retryAfter(new Headers(), { retryAfterMs: 1500 }), 1500);
  assert.equal(retryAfter(new Headers(), {}), undefined);
});
