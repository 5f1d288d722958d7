// The README's curl walk through openapi-typescript types + openapi-fetch. No cast, no `any`.
// Checked by tests/e2e/test_generated_clients.py: tsc --strict, then run with BASE and WALK_ID set.
import createClient from "openapi-fetch";
import type { paths } from "./gen/schema";

const BASE = process.env.BASE ?? "http://127.0.0.1:8000";
const ID = process.env.WALK_ID ?? "demo";
const CHILD = `${ID}-child`;

const client = createClient<paths>({ baseUrl: BASE });

function fail(step: string, status: number, body: unknown): never {
  throw new Error(`${step}: unexpected ${status} ${JSON.stringify(body)}`);
}

// Fails to type-check when T is `any` (a generated type that leaks `any` makes the walk's checks vacuous).
function notAny<T>(value: T, ok: 0 extends 1 & T ? "any leaked here" : "ok"): T {
  void ok;
  return value;
}

async function main(): Promise<void> {
  // 1. create "demo" with meta.cwd: 201 + Location
  const created = await client.POST("/sessions", { body: { id: ID, meta: { cwd: "/work" } } });
  if (created.data === undefined) return fail("create", created.response.status, created.error);
  const session: string = created.data.id;
  const cwd: string | null = created.data.cwd;
  console.log("1.", created.response.status, created.response.headers.get("location"), session, cwd);

  // 2. one whole turn of 6 events
  const appended = await client.POST("/sessions/{id}/events", {
    params: { path: { id: ID } },
    body: {
      events: [
        { type: "turn/start", data: { turn: 1 } },
        {
          type: "user/message",
          surfaceOp: "append",
          data: { id: "u1", role: "user", content: [{ type: "text", text: "Hello" }], source: { kind: "user" } },
        },
        { type: "step/start", data: { turn: 1, step: 1 } },
        {
          type: "assistant/message",
          surfaceOp: "append",
          data: {
            turn: 1,
            step: 1,
            message: {
              id: "a1",
              role: "assistant",
              content: [{ type: "text", text: "Hi!" }],
              source: { kind: "model", provider: "deepseek", model: "deepseek-chat" },
            },
          },
        },
        { type: "step/end", data: { turn: 1, step: 1 } },
        { type: "turn/end", data: { turn: 1, reason: { kind: "completed" } } },
      ],
    },
  });
  if (appended.data === undefined) return fail("append", appended.response.status, appended.error);
  const lastSeq: number = notAny(appended.data.events[appended.data.events.length - 1].seq, "ok");
  console.log("2.", appended.response.status, appended.data.events.length, "events, last seq", lastSeq);

  // 3. fork into "demo-child"
  const forked = await client.POST("/sessions/{id}/fork", {
    params: { path: { id: ID } },
    body: { sessionId: CHILD },
  });
  if (forked.data === undefined) return fail("fork", forked.response.status, forked.error);
  const parent: string | null = forked.data.parentSession;
  const seedLength: number | null = forked.data.seedLength;
  console.log("3.", forked.response.status, forked.response.headers.get("location"), parent, seedLength);

  // 4. the child's model history: content[0].text of the first message
  const history = await client.GET("/sessions/{id}/history", { params: { path: { id: CHILD } } });
  if (history.data === undefined) return fail("history", history.response.status, history.error);
  const first = history.data.messages[0];
  const block = first.content[0];
  const maybeText = block.text;
  if (block.type !== "text" || maybeText === undefined) throw new Error(`first block is ${block.type}`);
  const text: string = notAny(maybeText, "ok");
  console.log("4.", history.response.status, text, "eventCount", history.data.eventCount);

  // 5. open turn 2, then fork mid-turn: 409 NOT_AT_TURN_BOUNDARY
  const opened = await client.POST("/sessions/{id}/events", {
    params: { path: { id: ID } },
    body: { events: [{ type: "turn/start", data: { turn: 2 } }] },
  });
  if (opened.data === undefined) return fail("turn 2", opened.response.status, opened.error);
  console.log("5a.", opened.response.status, opened.data.session.openTurn);

  const midTurn = await client.POST("/sessions/{id}/fork", { params: { path: { id: ID } } });
  if (midTurn.error === undefined) throw new Error("the mid-turn fork succeeded");
  const problem = midTurn.error;
  if (problem.code !== "NOT_AT_TURN_BOUNDARY") throw new Error(`unexpected code ${problem.code}`);
  const lastEventType: string = notAny(problem.lastEventType, "ok");
  const openTurn: number | null = problem.openTurn;
  const lastTurnEndSeq: number | null = problem.lastTurnEndSeq;
  console.log("5b.", midTurn.response.status, problem.code, lastEventType, openTurn, lastTurnEndSeq);

  // 6. a replace appended to the child reads back as a ReplaceOp, the stored "append" of seq 1 as "append"
  const replaced = await client.POST("/sessions/{id}/events", {
    params: { path: { id: CHILD } },
    body: { events: [{
          type: "user/message",
          surfaceOp: { op: "replace", start: 1, end: 1 },
          sourceEventSeqs: [1],
          data: { id: "u1b", role: "user", content: [{ type: "text", text: "Hello, edited" }], source: { kind: "user" } },
        }] },
  });
  if (replaced.data === undefined) return fail("replace", replaced.response.status, replaced.error);
  const replacement = replaced.data.events[0];
  if (!("surfaceOp" in replacement) || typeof replacement.surfaceOp === "string") throw new Error("no replace");
  const start: number = notAny(replacement.surfaceOp.start, "ok");
  const read = await client.GET("/sessions/{id}/events", {
    params: { path: { id: CHILD }, query: { from: 1, limit: 1 } },
  });
  if (read.data === undefined) return fail("read", read.response.status, read.error);
  const stored = read.data.events[0];
  if (!("surfaceOp" in stored) || stored.surfaceOp !== "append") throw new Error(`seq 1 is ${JSON.stringify(stored)}`);
  console.log("6.", replaced.response.status, replacement.surfaceOp.op, start, stored.type, stored.surfaceOp);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
