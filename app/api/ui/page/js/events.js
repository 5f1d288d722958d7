// The raw log on demand, a page at a time (GET /sessions/{id}/events?from=&limit=): each event's seq, type and time,
// its JSON when opened, and "Fork here" on every turn/end. The last page grows with live events.

import { request, sessionPath } from "./api.js";
import { formatCount, formatTime, h, replaceChildren, sessionHref, shorten } from "./dom.js";
import { projectMessage } from "./model.js";
import { problemBox } from "./problem.js";

export const PAGE = 100;

function summaryOf(event) {
  if (event.type === "turn/end") return event.data?.reason?.kind ?? "";
  if (event.type === "turn/start") return `turn ${event.data?.turn}`;
  if (event.type === "tool/call") return `${event.data?.name ?? ""} ${shorten(event.data?.arguments ?? "", 80)}`;
  const message = projectMessage(event);
  const text = message?.content?.find?.((block) => typeof block?.text === "string")?.text;
  if (text) return shorten(text.replace(/\s+/g, " "), 100);
  if (message?.content?.[0]?.type === "tool-result") return `result of ${message.content[0].toolCallId}`;
  return "";
}

export class EventsView {
  constructor(container, { sessionId, onFork }) {
    this.container = container;
    this.sessionId = sessionId;
    this.onFork = onFork;
    this.from = 0;
    this.events = [];
    this.count = 0;
    this.loading = null;
  }

  href(from) {
    return `${sessionHref(this.sessionId, "events")}?from=${Math.max(0, from)}`;
  }

  /** Reads and shows the page that starts at `from`. */
  async show(from) {
    this.from = Math.max(0, Number.isFinite(from) ? Math.trunc(from) : 0);
    replaceChildren(this.container, h("p", { class: "muted loading" }, `Reading events from #${this.from}…`));
    try {
      const page = await request("GET", sessionPath(this.sessionId, "/events"), { query: { from: this.from, limit: PAGE } });
      this.events = page.events;
      this.count = page.eventCount;
      this.render();
    } catch (problem) {
      replaceChildren(this.container, problemBox(problem));
    }
  }

  render() {
    const last = Math.max(0, this.count - PAGE);
    const link = (label, from, disabled) =>
      disabled ? h("span", { class: "pager-link disabled", "aria-disabled": "true" }, label) : h("a", { class: "pager-link", href: this.href(from) }, label);
    const goto = h("input", { id: "events-from", type: "number", min: 0, max: Math.max(0, this.count - 1), value: this.from, inputmode: "numeric" });
    const pager = h(
      "nav",
      { class: "pager", "aria-label": "event pages" },
      link("First", 0, this.from === 0),
      link("Previous", this.from - PAGE, this.from === 0),
      link("Next", this.from + PAGE, this.from + PAGE >= this.count),
      link("Latest", last, this.from >= last),
      h(
        "form",
        { class: "goto", onsubmit: (event) => {
            event.preventDefault();
            location.hash = this.href(Number(goto.value)).slice(1);
          } },
        h("label", { for: "events-from" }, "From seq"),
        goto,
        h("button", { type: "submit" }, "Go"),
      ),
    );
    this.list = h("ol", { class: "events", start: this.from, "aria-label": "events" }, this.events.map((event) => this.row(event)));
    this.caption = h("p", { class: "muted events-caption" });
    this.renderCaption();
    replaceChildren(this.container, pager, this.caption, this.list, this.events.length ? null : h("p", { class: "muted" }, "No events here."));
  }

  renderCaption() {
    const shown = this.events.length;
    this.caption.textContent = shown
      ? `Events #${this.from}–#${this.from + shown - 1} of ${formatCount(this.count)}`
      : `${formatCount(this.count)} events`;
  }

  row(event) {
    const body = h("pre", { class: "event-json" });
    const details = h(
      "details",
      { class: "event", ontoggle: () => details.open && !body.textContent && (body.textContent = JSON.stringify(event, null, 2)) },
      h(
        "summary",
        {},
        h("span", { class: "seq" }, `#${event.seq}`),
        h("span", { class: "type" }, event.type),
        h("span", { class: "time" }, formatTime(event.time)),
        h("span", { class: "event-summary" }, summaryOf(event)),
      ),
      body,
    );
    const fork =
      event.type === "turn/end"
        ? h("button", { type: "button", class: "fork-here", onclick: () => this.onFork(event.seq, `the end of turn ${event.data?.turn} (seq ${event.seq})`) }, "Fork here")
        : null;
    return h("li", { class: `event-row type-${event.type.replace(/[^a-z0-9]/gi, "-")}`, dataset: { seq: event.seq } }, details, fork);
  }

  /** A live event: shown when this is the page it belongs to and it has room. */
  live(event) {
    this.count = Math.max(this.count, event.seq + 1);
    if (!this.list) return;
    if (event.seq === this.from + this.events.length && this.events.length < PAGE) {
      this.events.push(event);
      this.list.append(this.row(event));
      this.container.querySelector(".events + p.muted")?.remove();
    }
    this.renderCaption();
  }
}
