// Share links (spec 18) in the TypeScript client against a real server: sessions.share, shares and unshare, and
// client.shared(token) with get, events, history, tail and fork; a live share's tail ends at its revoke.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Forklog, ShareNotFoundError, ShareNotLiveError } from "../dist/index.js";
import { SERVER, note, turn } from "./helpers.mjs";

const client = () => new Forklog({ baseUrl: SERVER, timeoutMs: 10_000 });

test("a share made, read, continued and revoked", async () => {
  const forklog = client();
  await forklog.sessions.create({ id: "ts-share", meta: { cwd: "/home/me" } });
  await forklog.sessions.append("ts-share", turn(1));
  const made = await forklog.sessions.share("ts-share", { expiresIn: "P1D", redact: ["cwd"] });
  assert.equal(made.upTo, 5);
  assert.deepEqual(made.redact, ["cwd"]);
  assert.ok(made.token.length >= 43 && made.url.endsWith(made.token));
  const listed = await forklog.sessions.shares("ts-share");
  assert.deepEqual(listed.map((share) => share.id), [made.id]);
  assert.equal("token" in listed[0], false);

  const shared = forklog.shared(made.token);
  const session = await shared.get();
  assert.deepEqual([session.eventCount, session.cwd, "id" in session], [6, null, false]);
  await forklog.sessions.append("ts-share", turn(2));
  const seqs = [];
  for await (const event of shared.events({ pageSize: 4 })) seqs.push(event.seq);
  assert.deepEqual(seqs, [0, 1, 2, 3, 4, 5]);
  assert.deepEqual((await shared.history()).messages.map((message) => message.role), ["user", "assistant"]);
  await assert.rejects(shared.tail().next(), ShareNotLiveError);
  const child = await shared.fork();
  assert.deepEqual([child.origin, child.parentSession, child.eventCount], ["share", null, 6]);

  await forklog.sessions.unshare("ts-share", made.id);
  await assert.rejects(shared.get(), ShareNotFoundError);
});

test("a live share's tail ends at its revoke", async () => {
  const forklog = client();
  await forklog.sessions.create({ id: "ts-share-live" });
  await forklog.sessions.append("ts-share-live", turn(1));
  const made = await forklog.sessions.share("ts-share-live", { upTo: "live" });
  const seqs = [];
  for await (const event of forklog.shared(made.token).tail()) {
    seqs.push(event.seq);
    if (event.seq === 5) await forklog.sessions.append("ts-share-live", [note(1)]);
    if (event.seq === 6) await forklog.sessions.unshare("ts-share-live", made.id);
  }
  assert.deepEqual(seqs, [0, 1, 2, 3, 4, 5, 6]);
});
