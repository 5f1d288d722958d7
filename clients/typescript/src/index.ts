// @forklog/client: forklog's TypeScript client, on fetch (Node 20+ and browsers).
//
//   const client = new Forklog({ baseUrl: "http://127.0.0.1:8000" });
//   await client.sessions.create({ id: "demo" });
//   await client.sessions.append("demo", [{ type: "turn/start", data: { turn: 1 } }]);
//   for await (const event of client.sessions.tail("demo")) console.log(event.seq, event.type);
//
// Every create, append and fork carries an Idempotency-Key reused by its retries, so a call that resolves took
// effect exactly once; list and events follow every page; tail follows the session live across disconnects.
export { Forklog, Sessions, Shared } from "./client.js";
export * from "./errors.js";
export { type CoreEventType, isCoreEvent } from "./events.js";
export type * from "./types.js";
export type { components, operations, paths } from "./schema.js";
