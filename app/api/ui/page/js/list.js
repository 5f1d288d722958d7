// The session list: GET /sessions page by page with its cursors, newest first (order=updated: the most recently
// active first) or in creation order, optionally only the children of one parent, or the answer to a search (q),
// each match's snippet shown with the word marked. Archived sessions are left out unless "Show archived" is on.

import { request } from "./api.js";
import { formatCount, formatTime, h, replaceChildren, sessionLink, shorten } from "./dom.js";
import { problemBox } from "./problem.js";

const SIZES = [25, 50, 100, 200];
const WORD = /[\p{L}\p{N}]+/gu; // a search's words: runs of letters and digits (spec 12)

/** The list's state in the URL fragment: #/?order=newest&parent=ID&limit=50&q=words&archived=any (cursors stay in
 * memory). */
export function listParams(params) {
  const limit = Number(params.get("limit"));
  return {
    order: params.get("order") === "created" ? "created" : "newest",
    parent: params.get("parent") ?? "",
    limit: SIZES.includes(limit) ? limit : 50,
    q: (params.get("q") ?? "").slice(0, 200),
    archived: params.get("archived") === "any",
  };
}

const listHref = ({ order, parent, limit, q, archived }) => {
  const query = new URLSearchParams({ order, limit: String(limit) });
  if (parent) query.set("parent", parent);
  if (q) query.set("q", q);
  if (archived) query.set("archived", "any");
  return `#/?${query}`;
};

/** A match's snippet as text with the query's first word marked (a <mark> element: never HTML from the data). */
export function markedSnippet(snippet, q) {
  const words = (q.match(WORD) ?? []).map((word) => word.toLowerCase());
  if (!words.length) return [snippet];
  const prefix = words.length === 1;
  for (const found of snippet.matchAll(WORD)) {
    const word = found[0].toLowerCase();
    if (word === words[0] || (prefix && word.startsWith(words[0]))) {
      const end = found.index + found[0].length;
      return [snippet.slice(0, found.index), h("mark", {}, snippet.slice(found.index, end)), snippet.slice(end)];
    }
  }
  return [snippet];
}

export class ListView {
  constructor(root) {
    this.root = root;
    this.cursors = [null]; // the cursor of each page read so far (page 0 has none)
    this.page = 0;
  }

  async open(params) {
    this.params = listParams(params);
    this.page = 0;
    this.cursors = [null];
    this.buildFrame();
    await this.showPage();
  }

  buildFrame() {
    const { order, parent, limit, q, archived } = this.params;
    const orderSelect = h(
      "select",
      { id: "list-order", name: "order" },
      h("option", { value: "newest", selected: order === "newest" }, "Newest first"),
      h("option", { value: "created", selected: order === "created" }, "Creation order"),
    );
    const parentInput = h("input", { id: "list-parent", name: "parent", value: parent, placeholder: "any", spellcheck: "false", autocomplete: "off" });
    const sizeSelect = h("select", { id: "list-limit", name: "limit" }, SIZES.map((size) => h("option", { value: size, selected: size === limit }, String(size))));
    // A toggle: the list follows it at once (the other controls wait for "Show").
    const archivedBox = h("input", {
      id: "list-archived",
      name: "archived",
      type: "checkbox",
      checked: archived,
      onchange: (event) => event.target.form.requestSubmit(),
    });
    const searchInput = h("input", { id: "list-q", name: "q", type: "search", value: q, placeholder: "words in titles and messages", maxlength: "200", spellcheck: "false", autocomplete: "off" });
    const form = h(
      "form",
      {
        class: "list-controls",
        onsubmit: (event) => {
          event.preventDefault();
          const next = listHref({
            order: orderSelect.value,
            parent: parentInput.value.trim(),
            limit: Number(sizeSelect.value),
            q: searchInput.value.trim(),
            archived: archivedBox.checked,
          });
          if (location.hash === next) this.open(new URLSearchParams(next.slice(3)));
          else location.hash = next.slice(1);
        },
      },
      h("div", { class: "field search-field" }, h("label", { for: "list-q" }, "Search"), searchInput),
      h("div", { class: "field" }, h("label", { for: "list-order" }, "Order"), orderSelect),
      h("div", { class: "field" }, h("label", { for: "list-parent" }, "Children of"), parentInput),
      h("div", { class: "field" }, h("label", { for: "list-limit" }, "Per page"), sizeSelect),
      h("div", { class: "field checkbox-field" }, archivedBox, h("label", { for: "list-archived" }, "Show archived")),
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
      const { items, more } = await this.readPage();
      this.render(items, more);
    } catch (problem) {
      replaceChildren(this.body, problemBox(problem));
    }
  }

  /** One page, by its cursor: newest first is order=updated (the server keeps that order: no page is read twice). */
  async readPage() {
    const { order, parent, limit, q, archived } = this.params;
    const query = {
      limit,
      cursor: this.cursors[this.page],
      parent,
      q: q || null,
      order: order === "newest" ? "updated" : "created",
      archived: archived ? "any" : null,
    };
    const answer = await request("GET", "/sessions", { query });
    this.cursors[this.page + 1] = answer.nextCursor;
    return { items: answer.items, more: answer.nextCursor !== null };
  }

  render(items, more) {
    const { q, order, archived } = this.params;
    const named = (session) => {
      const name = session.title ?? session.preview;
      return [
        h("span", { class: name ? "session-name" : "session-name muted" }, name ? shorten(name, 80) : "(untitled)"),
        session.archived ? [" ", h("span", { class: "archived-badge" }, "Archived")] : null,
        session.match ? h("p", { class: "snippet" }, markedSnippet(session.match.snippet, q)) : null,
      ];
    };
    const row = (session) =>
      h(
        "tr",
        { dataset: { id: session.id } },
        h("th", { scope: "row", "data-label": "Session" }, sessionLink(session.id)),
        h("td", { "data-label": "Title", class: "title-cell" }, named(session)),
        h("td", { "data-label": "Updated", class: "updated-cell" }, formatTime(session.updatedAt)),
        h("td", { "data-label": "Events", class: "number" }, formatCount(session.eventCount)),
        h("td", { "data-label": "Open turn", class: "open-turn-cell" }, session.openTurn === null ? "–" : `turn ${session.openTurn}`),
        h("td", { "data-label": "Forkable", class: "forkable-cell" }, session.forkable ? "yes" : "no"),
        h("td", { "data-label": "Parent" }, session.parentSession ? sessionLink(session.parentSession) : "–"),
      );
    const pager = h(
      "nav",
      { class: "pager", "aria-label": "session pages" },
      h("button", { type: "button", disabled: this.page === 0, onclick: () => this.turnPage(-this.page) }, "First"),
      h("button", { type: "button", disabled: this.page === 0, onclick: () => this.turnPage(-1) }, "Previous"),
      h("span", { class: "page-number" }, `Page ${this.page + 1}`),
      h("button", { type: "button", disabled: !more, onclick: () => this.turnPage(1) }, "Next"),
      h("button", { type: "button", onclick: () => this.open(new URLSearchParams(location.hash.slice(3))) }, "Refresh"),
    );
    const caption = `${q ? `Matching “${q}”, ` : ""}${order === "newest" ? "most recently active first" : "in creation order"}${archived ? ", archived ones included" : ""}`;
    const table = h(
      "table",
      { class: "sessions" },
      h("caption", { class: "muted" }, caption),
      h(
        "thead",
        {},
        h("tr", {}, ["Session", "Title", "Updated", "Events", "Open turn", "Forkable", "Parent"].map((name) => h("th", { scope: "col" }, name))),
      ),
      h("tbody", {}, items.map(row)),
    );
    const empty = q ? "No session matches." : this.params.parent ? "This session has no children." : "No sessions yet.";
    replaceChildren(this.body, items.length ? table : h("p", { class: "empty" }, empty), pager);
  }

  async turnPage(delta) {
    this.page = Math.max(0, this.page + delta);
    await this.showPage();
  }
}
