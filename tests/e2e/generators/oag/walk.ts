// The README's curl walk through an openapi-generator typescript-fetch client. No cast, no `any`.
// Checked by tests/e2e/test_generated_clients.py: tsc --strict, then run with BASE and WALK_ID set.
import { Configuration, SessionsApi, ResponseError, type ForkSession409Problem } from "./gen";

const BASE = process.env.BASE ?? "http://127.0.0.1:8000";
const ID = process.env.WALK_ID ?? "demo";
const CHILD = `${ID}-child`;

const api = new SessionsApi(new Configuration({ basePath: BASE }));

// Fails to type-check when T is `any` (a generated type that leaks `any` makes the walk's checks vacuous).
function notAny<T>(value: T, ok: 0 extends 1 & T ? "any leaked here" : "ok"): T {
  void ok;
  return value;
}

async function main(): Promise<void> {
  // 1. create "demo" with meta.cwd: 201 + Location
  const created = await api.createSessionRaw({ sessionCreate: { id: ID, meta: { cwd: "/work" } } });
  const createdSession = await created.value();
  const cwd: string | null = createdSession.cwd;
  console.log("1.", created.raw.status, created.raw.headers.get("location"), createdSession.id, cwd);

  // 2. one whole turn of 6 events
  const appended = await api.appendEvents({
    id: ID,
    appendRequest: {
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
  const lastSeq: number = notAny(appended.events[appended.events.length - 1].seq, "ok");
  console.log("2.", appended.events.length, "events, last seq", lastSeq);

  // 3. fork into "demo-child"
  const forked = await api.forkSessionRaw({ id: ID, forkRequest: { sessionId: CHILD } });
  const child = await forked.value();
  const parent: string | null = child.parentSession;
  const seedLength: number | null = child.seedLength;
  console.log("3.", forked.raw.status, forked.raw.headers.get("location"), parent, seedLength);

  // 4. the child's model history: content[0].text of the first message
  const history = await api.readHistory({ id: CHILD });
  const first = history.messages[0];
  const block = first.content[0];
  const maybeText = block.text;
  if (block.type !== "text" || maybeText === undefined) throw new Error(`first block is ${block.type}`);
  const text: string = notAny(maybeText, "ok");
  console.log("4.", text, "eventCount", history.eventCount);

  // 5. open turn 2, then fork mid-turn: 409 NOT_AT_TURN_BOUNDARY
  const opened = await api.appendEvents({ id: ID, appendRequest: { events: [{ type: "turn/start", data: { turn: 2 } }] } });
  console.log("5a.", opened.session.openTurn);

  try {
    await api.forkSession({ id: ID });
    throw new Error("the mid-turn fork succeeded");
  } catch (e: unknown) {
    if (!(e instanceof ResponseError)) throw e;
    // Generated without runtime checks (see test_generated_clients.py): the body is the server's JSON as it is.
    const problem: ForkSession409Problem = await e.response.json();
    if (problem.code !== "NOT_AT_TURN_BOUNDARY") throw new Error(`unexpected code ${problem.code}`);
    const lastEventType: string = notAny(problem.lastEventType, "ok");
    const openTurn: number | null = problem.openTurn;
    const lastTurnEndSeq: number | null = problem.lastTurnEndSeq;
    console.log("5b.", e.response.status, problem.code, lastEventType, openTurn, lastTurnEndSeq);
  }

  // 6. a replace appended to the child reads back as a ReplaceOp, the stored "append" of seq 1 as "append"
  const replaced = await api.appendEvents({ id: CHILD, appendRequest: { events: [{
          type: "user/message",
          surfaceOp: { op: "replace", start: 1, end: 1 },
          sourceEventSeqs: [1],
          data: { id: "u1b", role: "user", content: [{ type: "text", text: "Hello, edited" }], source: { kind: "user" } },
        }] } });
  const replacement = replaced.events[0];
  if (!("surfaceOp" in replacement) || typeof replacement.surfaceOp === "string") throw new Error("no replace");
  const start: number = notAny(replacement.surfaceOp.start, "ok");
  const read = await api.readEvents({ id: CHILD, from: 1, limit: 1 });
  const stored = read.events[0];
  if (!("surfaceOp" in stored) || stored.surfaceOp !== "append") throw new Error(`seq 1 is ${JSON.stringify(stored)}`);
  console.log("6.", replacement.surfaceOp.op, start, stored.type, stored.surfaceOp);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
