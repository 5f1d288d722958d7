// The TypeScript client (spec 15) against a real server, directly and through the proxy that loses connections
// (tests/clients/proxy.py). Every change is counted on the server itself: a call that resolved took effect exactly
// once, whatever the proxy lost; a tail yields every event once and in order and ends with its session.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ConnectionError,
  Forklog,
  ForklogError,
  NotAtTurnBoundaryError,
  NotInTurnError,
  RateLimitedError,
  SeqConflictError,
  SessionNotFoundError,
} from "../dist/index.js";
import {
  APPEND,
  PROXY,
  SERVER,
  STREAM,
  direct,
  exists,
  note,
  plan,
  proxyLog,
  sessionIds,
  storedSeqs,
  turn,
} from "./helpers.mjs";

const client = (baseUrl, options = {}) => new Forklog({ baseUrl, timeoutMs: 10_000, ...options });

async function faultsSince(mark) {
  return (await proxyLog()).slice(mark).filter((seen) => seen.fault).map((seen) => seen.fault);
}

test("the README walk", async () => {
  const forklog = client(SERVER);
  const created = await forklog.sessions.create({ id: "ts-walk", meta: { cwd: "/work" } });
  const appended = await forklog.sessions.append("ts-walk", turn(1));
  const child = await forklog.sessions.fork("ts-walk", { sessionId: "ts-walk-child" });
  const history = await forklog.sessions.history("ts-walk-child");
  await forklog.sessions.append("ts-walk", [{ type: "turn/start", data: { turn: 2 } }]);
  const refused = await forklog.sessions.fork("ts-walk").catch((error) => error);
  const atFive = await forklog.sessions.fork("ts-walk", { atSeq: 5 });
  const lineage = await forklog.sessions.lineage("ts-walk-child");
  const snapshot = await forklog.sessions.snapshot("ts-walk", { atSeq: 5 });
  const copy = await forklog.sessions.create({ id: "ts-walk-copy", seed: snapshot.seed, meta: snapshot.meta });

  assert.deepEqual([created.id, created.cwd, created.eventCount], ["ts-walk", "/work", 0]);
  assert.deepEqual(appended.events.map((event) => event.seq), [0, 1, 2, 3, 4, 5]);
  assert.deepEqual([child.parentSession, child.seedLength, child.eventCount], ["ts-walk", 6, 6]);
  assert.deepEqual(history.messages.map((message) => message.role), ["user", "assistant"]);
  assert.ok(refused instanceof NotAtTurnBoundaryError && refused instanceof ForklogError);
  assert.deepEqual([refused.status, refused.code, refused.problem.openTurn, refused.problem.lastTurnEndSeq], [
    409,
    "NOT_AT_TURN_BOUNDARY",
    2,
    5,
  ]);
  assert.equal(refused.name, "NotAtTurnBoundaryError");
  assert.equal(atFive.seedLength, 6);
  assert.deepEqual(lineage.ancestors.map((session) => session.id), ["ts-walk"]);
  assert.equal(lineage.missingAncestor, null);
  assert.deepEqual([copy.parentSession, copy.eventCount], ["ts-walk", 6]);
});

test("problems reject with their code's class and the whole body", async () => {
  const forklog = client(SERVER);
  await forklog.sessions.create({ id: "ts-errors" });
  const conflict = await forklog.sessions.append("ts-errors", [note(1)], { expectedSeq: 3 }).catch((e) => e);
  const missing = await forklog.sessions.get("ts-no-such").catch((e) => e);
  const unknown = await forklog.sessions.delete("ts-no-such").catch((e) => e);

  assert.ok(conflict instanceof SeqConflictError);
  assert.equal(conflict.problem.currentSeq, 0);
  assert.ok(missing instanceof SessionNotFoundError);
  assert.deepEqual([missing.status, missing.problem.instance], [404, "/sessions/ts-no-such"]);
  assert.ok(unknown instanceof SessionNotFoundError); // a delete with no answer lost: a missing session is an error
});

for (const kind of ["before_request", "after_answer"]) {
  test(`a lost create, append, fork or delete (${kind}) is applied exactly once`, async () => {
    const prefix = `ts-once-${kind}`;
    const mark = (await proxyLog()).length;
    await plan([
      { kind, path: "^/sessions$", method: "POST" },
      { kind, path: APPEND, method: "POST" },
      { kind, path: "/fork$", method: "POST" },
      { kind, path: `^/sessions/${prefix}-gone$`, method: "DELETE" },
    ]);
    const forklog = client(PROXY);
    await forklog.sessions.create({ id: prefix });
    const appended = await forklog.sessions.append(prefix, turn(1));
    const child = await forklog.sessions.fork(prefix, { sessionId: `${prefix}-child` });
    await direct("/sessions", { id: `${prefix}-gone` });
    await forklog.sessions.delete(`${prefix}-gone`);

    assert.deepEqual(await faultsSince(mark), [kind, kind, kind, kind]);
    assert.equal(appended.session.eventCount, 6);
    assert.equal(child.seedLength, 6);
    assert.deepEqual(await storedSeqs(prefix), [0, 1, 2, 3, 4, 5]);
    assert.deepEqual((await sessionIds(prefix)).sort(), [prefix, `${prefix}-child`]);
    const posts = (await proxyLog()).slice(mark).filter((seen) => seen.method === "POST");
    assert.equal(posts[0].idempotency_key, posts[1].idempotency_key); // each retry sent its call's key
    assert.notEqual(posts[0].idempotency_key, posts[2].idempotency_key); // and each call had its own
  });
}

test("timeoutMs bounds each attempt, and a timed-out attempt is retried", async () => {
  await direct("/sessions", { id: "ts-stalled" });
  await plan([
    { kind: "stall", path: APPEND, method: "POST", seconds: 5 },
    { kind: "stall", path: "^/sessions/ts-stalled$", method: "GET", seconds: 5 },
  ]);
  const forklog = new Forklog({ baseUrl: PROXY, timeoutMs: 500 });

  const started = Date.now();
  const appended = await forklog.sessions.append("ts-stalled", [note(1)]);
  const session = await forklog.sessions.get("ts-stalled");
  const took = Date.now() - started;

  assert.deepEqual(appended.events.map((event) => event.seq), [0]);
  assert.equal(session.eventCount, 1);
  assert.ok(took < 4000, `took ${took} ms`); // each stalled attempt gave up after its own 0.5 s
});

test("a call out of retries rejects with ConnectionError and may be called again with its key", async () => {
  await direct("/sessions", { id: "ts-again" });
  await plan([{ kind: "after_answer", path: APPEND, method: "POST", times: 3 }]);
  const forklog = client(PROXY, { maxRetries: 2 });

  const lost = await forklog.sessions.append("ts-again", [note(1)], { idempotencyKey: "ts-note-1" }).catch((e) => e);
  const again = await forklog.sessions.append("ts-again", [note(1)], { idempotencyKey: "ts-note-1" });

  assert.ok(lost instanceof ConnectionError);
  assert.deepEqual(again.events.map((event) => event.seq), [0]);
  assert.deepEqual(await storedSeqs("ts-again"), [0]);
});

test("Retry-After is waited for; a 429 that lasts rejects with its problem", async () => {
  await direct("/sessions", { id: "ts-wait" });
  const limited = { code: "RATE_LIMITED", status: 429, detail: "slow down", retryAfterMs: 1000 };
  const answer = { kind: "answer", path: APPEND, method: "POST", status: 429, headers: { "Retry-After": "1" } };
  await plan([{ ...answer, problem: limited }]);
  const started = Date.now();
  await client(PROXY).sessions.append("ts-wait", [note(1)]);
  const waited = Date.now() - started;
  await plan([{ ...answer, problem: limited }]);
  const refused = await client(PROXY, { maxRetries: 0 }).sessions.append("ts-wait", [note(2)]).catch((e) => e);

  assert.ok(waited >= 1000 && waited < 10_000, `waited ${waited} ms`);
  assert.ok(refused instanceof RateLimitedError);
  assert.equal(refused.problem.retryAfterMs, 1000);
  assert.deepEqual(await storedSeqs("ts-wait"), [0]);
});

test("list and events follow every page across lost answers", async () => {
  await direct("/sessions", { id: "ts-pages" });
  await direct("/sessions/ts-pages/events", { events: [...turn(1), ...turn(2)] });
  const children = [];
  for (let n = 0; n < 7; n += 1) children.push((await direct("/sessions/ts-pages/fork", { sessionId: `ts-pages-${n}` })).id);
  await plan([
    { kind: "after_answer", path: "^/sessions$", method: "GET", skip: 1 },
    { kind: "before_request", path: "^/sessions/[^/]+/events", method: "GET", skip: 1 },
  ]);
  const forklog = client(PROXY);

  const listed = [];
  for await (const session of forklog.sessions.list({ parent: "ts-pages", pageSize: 3 })) listed.push(session.id);
  const seqs = [];
  for await (const event of forklog.sessions.events("ts-pages", { pageSize: 5 })) seqs.push(event.seq);
  const later = [];
  for await (const event of forklog.sessions.events("ts-pages", { fromSeq: 9, pageSize: 2 })) later.push(event.seq);

  assert.deepEqual(listed, children);
  assert.deepEqual(seqs, [...Array(12).keys()]);
  assert.deepEqual(later, [9, 10, 11]);
});

test("the newer list and fork parameters are sent by their wire names", async () => {
  await direct("/sessions", { id: "ts-newer" });
  await direct("/sessions/ts-newer/events", { events: turn(1) });
  await plan([]);
  const mark = (await proxyLog()).length;
  const forklog = client(PROXY);
  const edited = [{ type: "turn/start", data: { turn: 1 } }];

  // A server before spec 12 may ignore or refuse them: what matters here is what it is sent.
  const ignore = (error) => assert.ok(error instanceof ForklogError);
  const filters = { order: "updated", direction: "desc", q: "hello", cwd: "/w", origin: "subagent", agentPreset: "p" };
  await (async () => {
    for await (const session of forklog.sessions.list(filters)) void session;
  })().catch(ignore);
  await forklog.sessions.fork("ts-newer", { atTurn: 0, events: edited }).catch(ignore);
  await forklog.sessions.fork("ts-newer", { atMessageId: "a1" }).catch(ignore);

  const [listed, atTurn, atMessage] = (await proxyLog()).slice(mark);
  assert.deepEqual(Object.fromEntries(new URLSearchParams(listed.query)), { ...filters, limit: "100" });
  assert.deepEqual(JSON.parse(atTurn.body), { atTurn: 0, events: edited });
  assert.deepEqual(JSON.parse(atMessage.body), { atMessageId: "a1" });
});

test("update archives and unarchives, and list's archived filter follows it", async () => {
  const forklog = client(SERVER);
  for (const id of ["ts-arch-a", "ts-arch-b"]) await forklog.sessions.create({ id, meta: { cwd: "/ts-archive" } });
  const listed = async (options = {}) => {
    const ids = [];
    for await (const session of forklog.sessions.list({ cwd: "/ts-archive", ...options })) ids.push(session.id);
    return ids;
  };

  const archived = await forklog.sessions.update("ts-arch-b", { archived: true });
  const shown = [await listed(), await listed({ archived: true }), await listed({ archived: "any" })];
  const stale = await forklog.sessions.update("ts-arch-a", { archived: true, expectedSeq: 5 }).catch((e) => e);
  const back = await forklog.sessions.update("ts-arch-b", { archived: false, instance: archived.instance });

  assert.equal(archived.archived, true);
  assert.deepEqual(shown, [["ts-arch-a"], ["ts-arch-b"], ["ts-arch-a", "ts-arch-b"]]);
  assert.ok(stale instanceof SeqConflictError);
  assert.equal(back.archived, false);
  assert.deepEqual(await listed(), ["ts-arch-a", "ts-arch-b"]);
});

test("interrupt closes an open turn, answers as an append, and NotInTurnError without one", async () => {
  const forklog = client(PROXY);
  await plan([{ kind: "after_answer", path: "/interrupt$", method: "POST", times: 1 }]); // its answer is lost once
  await forklog.sessions.create({ id: "ts-interrupt" });
  await forklog.sessions.append("ts-interrupt", turn(1).slice(0, 3)); // turn 1 open, inside step 1

  const closed = await forklog.sessions.interrupt("ts-interrupt", { expectedSeq: 3 });
  const again = await forklog.sessions.interrupt("ts-interrupt").catch((e) => e);

  assert.deepEqual(closed.events.map((event) => event.type), ["step/end", "turn/end"]);
  assert.deepEqual(closed.events.at(-1).data.reason, { kind: "interrupted" });
  assert.deepEqual(await storedSeqs("ts-interrupt"), [0, 1, 2, 3, 4]); // once, whatever the proxy lost
  assert.equal(closed.session.openTurn, null);
  assert.equal(typeof closed.session.stats.turns, "number");
  assert.deepEqual([closed.session.usage, closed.session.ownUsage], [{}, {}]);
  assert.ok(again instanceof NotInTurnError && again instanceof ForklogError);
  assert.deepEqual([again.status, again.code, again.problem.lastTurnEndSeq], [409, "NOT_IN_TURN", 4]);
});

test("a tail sees every event once and in order across drops and ends with its session", async () => {
  await direct("/sessions", { id: "ts-tail" });
  await direct("/sessions/ts-tail/events", { events: [0, 1, 2, 3, 4].map(note) });
  await plan([
    { kind: "mid_stream", path: STREAM, frames: 3 },
    { kind: "end_stream", path: STREAM, frames: 4 },
    { kind: "before_request", path: STREAM },
    { kind: "mid_stream", path: STREAM, frames: 0 },
    { kind: "mid_stream", path: STREAM, frames: 6 },
  ]);
  const mark = (await proxyLog()).length;
  let seenAll;
  const caughtUp = new Promise((resolve) => (seenAll = resolve));
  const writing = (async () => {
    const writer = client(SERVER);
    for (let n = 5; n < 30; n += 1) {
      await writer.sessions.append("ts-tail", [note(n)]);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await caughtUp; // a session deleted while its tail is away takes the events it has not seen along
    await writer.sessions.delete("ts-tail");
  })();

  const seqs = [];
  for await (const event of client(PROXY).sessions.tail("ts-tail")) {
    seqs.push(event.seq);
    if (event.seq === 29) seenAll();
  }
  await writing;

  assert.deepEqual(seqs, [...Array(30).keys()]);
  const resumed = (await proxyLog()).slice(mark).filter((seen) => seen.path.endsWith("/stream"));
  assert.deepEqual(resumed.slice(0, 3).map((seen) => seen.last_event_id), [null, "2", "6"]);
});

test("a tail from a seq ends when its session is deleted and made again while it is away", async () => {
  await direct("/sessions", { id: "ts-made-again" });
  await direct("/sessions/ts-made-again/events", { events: [0, 1, 2, 3, 4, 5].map(note) });
  await plan([{ kind: "mid_stream", path: STREAM, frames: 3 }]);
  const forklog = client(PROXY);

  const seqs = [];
  for await (const event of forklog.sessions.tail("ts-made-again", { fromSeq: 2 })) {
    seqs.push(event.seq);
    if (event.seq === 4) {
      // The proxy cuts the stream after this frame; the session is made anew before the tail reconnects.
      await direct("/sessions/ts-made-again");
      await direct("/sessions", { id: "ts-made-again" });
      await direct("/sessions/ts-made-again/events", { events: [0, 1, 2, 3, 4, 5, 6, 7].map(note) });
    }
  }
  const missing = await forklog.sessions.tail("ts-never-made").next().catch((e) => e);

  assert.deepEqual(seqs, [2, 3, 4]);
  assert.ok(missing instanceof SessionNotFoundError);
});

test("a tail gives up after failed connects in a row, but a frame resets the count", async () => {
  await direct("/sessions", { id: "ts-tail-count" });
  await direct("/sessions/ts-tail-count/events", { events: [0, 1, 2, 3].map(note) });
  const drop = { kind: "before_request", path: STREAM };
  const oneFrame = { kind: "mid_stream", path: STREAM, frames: 1 };
  await plan([drop, oneFrame, drop, oneFrame, drop, oneFrame]);
  const forklog = client(PROXY, { maxRetries: 1 });

  const seqs = [];
  for await (const event of forklog.sessions.tail("ts-tail-count")) {
    seqs.push(event.seq);
    if (event.seq === 3) break;
  }
  await plan([{ ...drop, times: 2 }]);
  const gaveUp = await forklog.sessions.tail("ts-tail-count", { fromSeq: 4 }).next().catch((e) => e);

  assert.deepEqual(seqs, [0, 1, 2, 3]);
  assert.ok(gaveUp instanceof ConnectionError);
});

test("a tail stops when its signal is aborted", async () => {
  await direct("/sessions", { id: "ts-abort" });
  await direct("/sessions/ts-abort/events", { events: [note(0)] });
  const controller = new AbortController();
  const seqs = [];

  for await (const event of client(PROXY).sessions.tail("ts-abort", { signal: controller.signal })) {
    seqs.push(event.seq);
    setTimeout(() => controller.abort(), 100); // while the tail waits for the next event
  }

  assert.deepEqual(seqs, [0]);
  assert.ok(await exists("ts-abort"));
});

test("random drops change nothing twice and miss nothing", async () => {
  await direct("/sessions", { id: "ts-random" });
  const mark = (await proxyLog()).length;
  await plan([], { probability: 0.3, seed: 7 });
  const forklog = client(PROXY, { maxRetries: 10 });
  const seqs = [];
  const following = (async () => {
    for await (const event of forklog.sessions.tail("ts-random")) seqs.push(event.seq);
  })();
  for (let number = 1; number <= 4; number += 1) {
    await forklog.sessions.append("ts-random", turn(number));
    await forklog.sessions.fork("ts-random", { sessionId: `ts-random-${number}` });
    await forklog.sessions.append("ts-random", [note(number)]);
  }
  const deadline = Date.now() + 30_000;
  while (seqs.length < 28 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
  await forklog.sessions.delete("ts-random");
  await following;

  assert.deepEqual(seqs, [...Array(28).keys()]);
  assert.equal((await storedSeqs("ts-random-4")).length, 27);
  assert.deepEqual((await sessionIds("ts-random")).sort(), [1, 2, 3, 4].map((n) => `ts-random-${n}`));
  assert.ok((await faultsSince(mark)).length >= 5);
});

test("log reads the session as its DSH file, raw or zstd", async () => {
  const forklog = client(SERVER);
  await forklog.sessions.create({ id: "ts-log", meta: { cwd: "/work" } });
  await forklog.sessions.append("ts-log", turn(1));

  const raw = new TextDecoder().decode(await forklog.sessions.log("ts-log"));
  const compressed = await forklog.sessions.log("ts-log", { compression: "zstd" });

  const [header, ...lines] = raw.trimEnd().split("\n");
  assert.deepEqual([JSON.parse(header).type, JSON.parse(header).id, JSON.parse(header).cwd], ["session", "ts-log", "/work"]);
  assert.deepEqual(lines.map((line) => JSON.parse(line).seq), turn(1).map((_, seq) => seq));
  assert.ok(compressed instanceof Uint8Array);
  assert.deepEqual([...compressed.subarray(0, 4)], [0x28, 0xb5, 0x2f, 0xfd]);
  await assert.rejects(forklog.sessions.log("ts-nobody"), SessionNotFoundError);
});
