// The session list: GET /sessions page by page (creation order, nextCursor), or newest first (every page read,
// then shown from the end), optionally only the children of one parent.

import { request } from "./api.js";
import { formatCount, formatTime, h, replaceChildren, sessionLink } from "./dom.js";
import { problemBox } from "./problem.js";

const SIZES = [25, 50, 100, 200];
const ALL_PAGE = 1000; // the route's largest page, for reading every session (newest first)

/** The list's state in the URL fragment: #/?order=newest&parent=ID&limit=50&page=2 (cursors stay in memory). */
export function listParams(params) {
  const limit = Number(params.get("limit"));
  return {
    order: params.get("order") === "created" ? "created" : "newest",
    parent: params.get("parent") ?? "",
    limit: SIZES.includes(limit) ? limit : 50,
  };
}

const listHref = ({ order, parent, limit }) => {
  const query = new URLSearchParams({ order, limit: String(limit) });
  if (parent) query.set("parent", parent);
  return `#/?${query}`;
};

export class ListView {
  constructor(root) {
    this.root = root;
    this.cursors = [null]; // creation order: the cursor of each page read so far (page 0 has none)
    this.page = 0;
    this.all = null; // newest first: every session, read once
  }

  async open(params) {
    this.params = listParams(params);
    this.page = 0;
    this.cursors = [null];
    this.all = null;
    this.buildFrame();
    await this.showPage();
  }

  buildFrame() {
    const { order, parent, limit } = this.params;
    const orderSelect = h(
      "select",
      { id: "list-order", name: "order" },
      h("option", { value: "newest", selected: order === "newest" }, "Newest first"),
      h("option", { value: "created", selected: order === "created" }, "Creation order"),
    );
    const parentInput = h("input", { id: "list-parent", name: "parent", value: parent, placeholder: "any", spellcheck: "false", autocomplete: "off" });
    const sizeSelect = h("select", { id: "list-limit", name: "limit" }, SIZES.map((size) => h("option", { value: size, selected: size === limit }, String(size))));
    const form = h(
      "form",
      {
        class: "list-controls",
        onsubmit: (event) => {
          event.preventDefault();
          const next = listHref({ order: orderSelect.value, parent: parentInput.value.trim(), limit: Number(sizeSelect.value) });
          if (location.hash === next) this.open(new URLSearchParams(next.slice(3)));
          else location.hash = next.slice(1);
        },
      },
      h("div", { class: "field" }, h("label", { for: "list-order" }, "Order"), orderSelect),
      h("div", { class: "field" }, h("label", { for: "list-parent" }, "Children of"), parentInput),
      h("div", { class: "field" }, h("label", { for: "list-limit" }, "Per page"), sizeSelect),
      h("button", { type: "submit" }, "Show"),
    );
    this.body = h("div", { class: "list-body" });
    this.heading = h("h1", { tabindex: -1 }, parent ? `Children of ${parent}` : "Sessions");
    replaceChildren(
      this.root,
      h("div", { class: "title-row" }, this.heading, parent ? h("a", { href: listHref({ ...this.params, parent: "" }) }, "All sessions") : null),
      form,
      this.body,
    );
    this.heading.focus();
  }

  async showPage() {
    replaceChildren(this.body, h("p", { class: "muted loading", role: "status" }, "Reading sessions…"));
    try {
      const { items, more } = this.params.order === "newest" ? await this.newestPage() : await this.createdPage();
      this.render(items, more);
    } catch (problem) {
      replaceChildren(this.body, problemBox(problem));
    }
  }

  async createdPage() {
    const { parent, limit } = this.params;
    const answer = await request("GET", "/sessions", { query: { limit, cursor: this.cursors[this.page], parent } });
    this.cursors[this.page + 1] = answer.nextCursor;
    return { items: answer.items, more: answer.nextCursor !== null };
  }

  async newestPage() {
    if (this.all === null) {
      const all = [];
      let cursor = null;
      do {
        const answer = await request("GET", "/sessions", { query: { limit: ALL_PAGE, cursor, parent: this.params.parent } });
        all.push(...answer.items);
        cursor = answer.nextCursor;
        this.body.querySelector(".loading")?.replaceChildren(`Reading sessions… ${formatCount(all.length)}`);
      } while (cursor !== null);
      this.all = all.reverse();
    }
    const { limit } = this.params;
    return { items: this.all.slice(this.page * limit, (this.page + 1) * limit), more: (this.page + 1) * limit < this.all.length };
  }

  render(items, more) {
    const row = (session) =>
      h(
        "tr",
        { dataset: { id: session.id } },
        h("th", { scope: "row", "data-label": "Session" }, sessionLink(session.id)),
        h("td", { "data-label": "Created" }, formatTime(session.createdAt)),
        h("td", { "data-label": "Events", class: "number" }, formatCount(session.eventCount)),
        h("td", { "data-label": "Open turn", class: "open-turn-cell" }, session.openTurn === null ? "–" : `turn ${session.openTurn}`),
        h("td", { "data-label": "Forkable", class: "forkable-cell" }, session.forkable ? "yes" : "no"),
        h("td", { "data-label": "Last event" }, session.lastEventType ?? "–"),
        h("td", { "data-label": "Parent" }, session.parentSession ? sessionLink(session.parentSession) : "–"),
      );
    const pager = h(
      "nav",
      { class: "pager", "aria-label": "session pages" },
      h("button", { type: "button", disabled: this.page === 0, onclick: () => this.turnPage(-this.page) }, "First"),
      h("button", { type: "button", disabled: this.page === 0, onclick: () => this.turnPage(-1) }, "Previous"),
      h("span", { class: "page-number" }, `Page ${this.page + 1}${this.all ? ` of ${Math.max(1, Math.ceil(this.all.length / this.params.limit))}` : ""}`),
      h("button", { type: "button", disabled: !more, onclick: () => this.turnPage(1) }, "Next"),
      h("button", { type: "button", onclick: () => this.open(new URLSearchParams(location.hash.slice(3))) }, "Refresh"),
    );
    const table = h(
      "table",
      { class: "sessions" },
      h("caption", { class: "muted" }, this.all ? `${formatCount(this.all.length)} sessions, newest first` : "In creation order"),
      h(
        "thead",
        {},
        h("tr", {}, ["Session", "Created", "Events", "Open turn", "Forkable", "Last event", "Parent"].map((name) => h("th", { scope: "col" }, name))),
      ),
      h("tbody", {}, items.map(row)),
    );
    replaceChildren(this.body, items.length ? table : h("p", { class: "empty" }, this.params.parent ? "This session has no children." : "No sessions yet."), pager);
  }

  async turnPage(delta) {
    this.page = Math.max(0, this.page + delta);
    await this.showPage();
  }
}
