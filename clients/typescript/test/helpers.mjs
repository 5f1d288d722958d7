// What the tests share: the server and the proxy (started by tests/clients/test_typescript_client.py), events of
// whole turns, and what the server holds, read past the proxy.
import { timing } from "../dist/retry.js";

export const SERVER = process.env.FORKLOG_SERVER ?? "http://127.0.0.1:8000";
export const PROXY = process.env.FORKLOG_PROXY ?? SERVER;
export const APPEND = "^/sessions/[^/]+/events$";
export const STREAM = "/events/stream$";

// What these tests check does not depend on the wait's length (retry.test.mjs checks it): keep the suite quick.
timing.firstWaitMs = 20;

export function turn(number, text = "Hello") {
  return [
    { type: "turn/start", data: { turn: number } },
    {
      type: "user/message",
      surfaceOp: "append",
      data: { id: `u${number}`, role: "user", content: [{ type: "text", text }], source: { kind: "user" } },
    },
    { type: "step/start", data: { turn: number, step: 1 } },
    {
      type: "assistant/message",
      surfaceOp: "append",
      data: {
        turn: number,
        step: 1,
        message: {
          id: `a${number}`,
          role: "assistant",
          content: [{ type: "text", text: `Answer ${number}` }],
          source: { kind: "model", provider: "deepseek", model: "deepseek-chat" },
        },
      },
    },
    { type: "step/end", data: { turn: number, step: 1 } },
    { type: "turn/end", data: { turn: number, reason: { kind: "completed" } } },
  ];
}

export function note(number) {
  return { type: "test/note", data: { n: number } };
}

async function json(path, init) {
  const response = await fetch(SERVER + path, init);
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return response.status === 204 ? undefined : response.json();
}

export async function storedSeqs(id) {
  const page = await json(`/sessions/${id}/events?limit=10000`);
  return page.events.map((event) => event.seq);
}

export async function sessionIds(prefix) {
  const ids = [];
  let cursor = null;
  do {
    const page = await json(`/sessions?limit=1000${cursor ? `&cursor=${cursor}` : ""}`);
    ids.push(...page.items.map((item) => item.id).filter((id) => id.startsWith(prefix)));
    cursor = page.nextCursor;
  } while (cursor !== null);
  return ids;
}

export async function exists(id) {
  return (await fetch(`${SERVER}/sessions/${id}`)).status === 200;
}

export async function direct(path, body) {
  return json(path, {
    method: body === undefined ? "DELETE" : "POST",
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** Plans the proxy's faults (tests/clients/proxy.py): [{kind, path, method, frames, times, skip, status, ...}]. */
export async function plan(faults, random = null) {
  const response = await fetch(`${PROXY}/__proxy/plan`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ faults, random }),
  });
  if (!response.ok) throw new Error(`plan: ${response.status}`);
}

/** What went through the proxy: [{method, path, idempotency_key, last_event_id, fault}]. */
export async function proxyLog() {
  return (await fetch(`${PROXY}/__proxy/log`)).json();
}
