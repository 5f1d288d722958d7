// The shared page's entry (GET /ui/shared/{token}, spec 18): a shared conversation, read-only, in the session
// browser's style, from the open routes /shared/{token}… (no key: this page never reads or sends one).
//
// The token is in this page's path; the page sends no Referer (Referrer-Policy and its meta say so), so no request
// it makes carries the token anywhere but to this service. Every text is set as text (messages.js): a message that
// holds markup or a markdown link shows it as written.

import { Problem, withQuery } from "./api.js";
import { ConversationView } from "./conversation.js";
import { formatCount, formatTime, h, replaceChildren } from "./dom.js";
import { Conversation, LogIndex } from "./model.js";
import { problemBox } from "./problem.js";

const SCAN_PAGE = 10000; // the events route's largest page
const PAGE_PREFIX = "/ui/shared/";
const main = document.getElementById("main");
const token = decodeURIComponent(location.pathname.slice(PAGE_PREFIX.length).split("/")[0] ?? "");
const base = `/shared/${encodeURIComponent(token)}`;
// The page's route says whether the share follows the session ("live") or is frozen at a turn/end.
const live = document.querySelector("meta[name='forklog-share']")?.content === "live";

class Missing extends Error {}

/** A GET of the share's routes: no key, no cookie, no referrer; a 404 is the one answer of every dead token. */
async function read(path, query = {}) {
  let response;
  try {
    response = await fetch(withQuery(`${base}${path}`, query), {
      headers: { Accept: "application/json" },
      credentials: "omit",
      referrerPolicy: "no-referrer",
      cache: "no-store",
    });
  } catch (error) {
    throw new Problem({ title: "No answer from forklog", detail: `the request failed (${error.message})` }, 0);
  }
  if (response.ok) return response.json();
  if (response.status === 404) throw new Missing();
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = { title: `HTTP ${response.status}`, detail: "the answer was not a problem document" };
  }
  throw new Problem(body, response.status);
}

function showMissing() {
  document.title = "Not found · forklog";
  replaceChildren(main, h("h1", { tabindex: -1 }, "Not found"), h("p", { class: "share-missing" }, "This link leads to no shared conversation."));
}

function facts(session) {
  const fact = (term, value) => h("div", { class: "fact" }, h("dt", {}, term), h("dd", {}, value));
  return h(
    "dl",
    { class: "facts" },
    fact("Events", formatCount(session.eventCount)),
    fact("Created", formatTime(session.createdAt)),
    session.updatedAt ? fact("Last active", formatTime(session.updatedAt)) : null,
    session.cwd ? fact("cwd", h("code", {}, session.cwd)) : null,
    fact("Shared", live ? "live: as the session grows" : `up to seq ${formatCount(session.eventCount - 1)}`),
  );
}

class SharedView {
  async open() {
    replaceChildren(main, h("p", { class: "muted loading", role: "status" }, "Opening the shared conversation…"));
    const session = await read("");
    const name = session.title || session.preview || "A shared conversation";
    document.title = `${name} · forklog`;
    this.badge = h("span", { class: "live-state", role: "status", "aria-live": "polite", hidden: !live, dataset: { state: "connecting" } }, "Connecting…");
    this.panel = h("section", { class: "panel", "aria-label": "conversation" });
    this.view = new ConversationView(this.panel, { sessionId: null, onFork: null, onEdit: null });
    replaceChildren(
      main,
      h("header", { class: "session-head" }, h("div", { class: "title-row" }, h("h1", { tabindex: -1, class: "session-title" }, name), this.badge), facts(session)),
      this.panel,
    );
    main.querySelector("h1").focus();
    await this.load();
  }

  /** The history and the log's boundaries (read in pages), then, for a live share, its tail from the end. */
  async load() {
    const progress = h("p", { class: "muted loading", role: "status" }, "Reading the history…");
    replaceChildren(this.panel, progress);
    const history = await read("/history");
    const end = history.eventCount;
    const index = new LogIndex();
    for (let from = 0; from < end; ) {
      progress.textContent = `Reading the log: ${formatCount(from)} of ${formatCount(end)} events…`;
      const page = await read("/events", { from, limit: Math.min(SCAN_PAGE, end - from) });
      if (page.events.length === 0) break;
      for (const event of page.events) if (event.seq < end) index.add(event);
      from = page.nextSeq;
    }
    this.conversation = new Conversation(history.messages, index);
    this.view.show(this.conversation);
    if (live) this.follow(end);
  }

  follow(from) {
    this.source?.close();
    this.nextSeq = from;
    const source = new EventSource(withQuery(`${base}/events/stream`, { from }));
    this.source = source;
    source.onopen = () => this.state("live", "Live");
    source.onmessage = (message) => {
      const event = JSON.parse(message.data);
      if (event.seq < this.nextSeq) return; // the browser resumed with Last-Event-ID: nothing is shown twice
      this.nextSeq = event.seq + 1;
      const change = this.conversation.apply(event);
      if (change.reload) {
        source.close();
        this.load().catch(fail);
        return;
      }
      this.view.update(change);
    };
    source.onerror = () => {
      if (source.readyState !== EventSource.CLOSED) {
        this.state("reconnecting", "Reconnecting…");
        return;
      }
      // Refused: the share was revoked or has expired (or the session is gone), or the service says why.
      this.state("stopped", "Ended");
      read("").catch((error) => (error instanceof Missing ? showMissing() : null));
    };
  }

  state(name, label) {
    this.badge.dataset.state = name;
    this.badge.textContent = label;
  }
}

function fail(error) {
  if (error instanceof Missing) showMissing();
  else replaceChildren(main, h("h1", { tabindex: -1 }, "The shared conversation"), problemBox(error instanceof Problem ? error : new Problem({ title: "Something went wrong in the page", detail: String(error?.message ?? error) }, 0)));
}

new SharedView().open().catch(fail);
