// A user's program on the installed @forklog/client: the README's walk, checked with tsc --strict (no cast, no
// any) and run against a real server (BASE, WALK_ID).
import { Forklog, ForklogError, NotAtTurnBoundaryError, isCoreEvent, type Event, type Session } from "@forklog/client";

declare const process: { env: Record<string, string | undefined> };

const BASE = process.env.BASE ?? "http://127.0.0.1:8000";
const ID = process.env.WALK_ID ?? "demo";

// Fails to type-check when T is `any` (a type that leaks `any` would make these checks vacuous).
function notAny<T>(value: T, ok: 0 extends 1 & T ? "any leaked here" : "ok"): T {
  void ok;
  return value;
}

const client = new Forklog({ baseUrl: BASE, maxRetries: 3 });

const created: Session = await client.sessions.create({ id: ID, meta: { cwd: "/work" } });
const count: number = notAny(created.eventCount, "ok");
console.log("1.", created.id, count, created.cwd);
const appended = await client.sessions.append(ID, [{ type: "turn/start", data: { turn: 1 } }]);
const seqs: number[] = appended.events.map((event) => notAny(event.seq, "ok"));
await client.sessions.append(ID, [{ type: "turn/end", data: { turn: 1, reason: { kind: "completed" } } }], {
  expectedSeq: 1,
});
const child = await client.sessions.fork(ID, { sessionId: `${ID}-child` });
const parent: string | null = notAny(child.parentSession, "ok");
console.log("2.", seqs, parent, child.seedLength);
await client.sessions.append(ID, [{ type: "turn/start", data: { turn: 2 } }]);
try {
  await client.sessions.fork(ID);
} catch (refused) {
  if (!(refused instanceof NotAtTurnBoundaryError)) throw refused;
  const lastTurnEnd: number | null = notAny(refused.problem.lastTurnEndSeq, "ok");
  const status: number = refused.status;
  console.log("3.", status, refused.code, lastTurnEnd);
}
const events: Event[] = [];
for await (const event of client.sessions.events(ID, { pageSize: 2 })) events.push(event);
const children: string[] = [];
for await (const session of client.sessions.list({ parent: ID })) children.push(session.id);
// Narrowed by its type, no cast: after `isCoreEvent` (another type is any string), `turn/start`'s data has a turn.
const turns: number[] = [];
for (const event of events) {
  if (!isCoreEvent(event)) continue;
  if (event.type === "turn/start") turns.push(notAny(event.data.turn, "ok"));
}
console.log("4.", events.map((event) => notAny(event.type, "ok")), children, turns);
const history = await client.sessions.history(`${ID}-child`);
const lastTurnEnd: number | null = (await client.sessions.get(ID)).lastTurnEndSeq;
console.log("5.", history.messages.map((message) => notAny(message.role, "ok")), lastTurnEnd);
try {
  await client.sessions.delete(`${ID}-child`);
} catch (error) {
  if (error instanceof ForklogError) console.log(error.code);
  throw error;
}
