// A session's lineage drawn as a tree (spec 18, "Lineage, drawn"): its ancestors up to the root, the session, its
// children and their children to a depth of three, each with its title (or preview), its fork point and a link.
//
// The drawing is an SVG the page makes itself, one row a session (an indented tree reads at any size, a phone's
// included). A node's children come from its own GET …/lineage (the only route that lists them, spec 7), asked
// only for nodes on screen; a sibling group longer than its depth's count is folded behind "+N more". A fork
// point's turn is the `data.turn` of the seed's last event, read from the parent (`…/events?from=seedLength-1
// &limit=1`), once per parent and seed length: 500 forks of one turn cost one such read.

import { request, sessionPath } from "./api.js";
import { sessionHref, shorten } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
export const DEPTH = 3; // children, grandchildren, great-grandchildren
export const SHOWN = [0, 12, 6, 4]; // the children shown of a node at each depth before "+N more"
const ROW = 44; // px a row: the label, then its facts
const INDENT = 22; // px a depth
const LABEL_POINTS = 60; // code points of a label before it is cut (the whole text is the row's tooltip)
const PARALLEL = 4; // requests in flight at once
const WINDOW_FROM = 150; // rows beyond which only those near the view are made into elements
const REDRAW_MS = 250; // while answers arrive, the tree is redrawn at most this often
export const DRAW_MEASURE = "lineage-tree-draw"; // the performance measure each draw leaves

// One formatter for every count (Number.toLocaleString makes a new one at each call: 1,000 of them cost more than
// the rest of a draw).
const COUNT = new Intl.NumberFormat("en-US");
const formatCount = (number) => COUNT.format(number);

/** A session's name on screen: its title, else the preview of its first message, else its id. */
export const nodeLabel = (session) => session.title || session.preview || session.id;

function svg(tag, attributes = {}, text = null) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) if (value !== null && value !== undefined) element.setAttribute(name, String(value));
  if (text !== null) element.textContent = text; // always text: a title may hold markup, which shows as written
  return element;
}

/** Runs `task()`s at most PARALLEL at a time. */
class Queue {
  constructor() {
    this.waiting = [];
    this.running = 0;
  }

  /** Drops what has not started (the page moved on). */
  clear() {
    const dropped = this.waiting.splice(0);
    for (const { reject } of dropped) reject(new Error("the tree is gone"));
  }

  run(task) {
    return new Promise((resolve, reject) => {
      this.waiting.push({ task, resolve, reject });
      this.next();
    });
  }

  next() {
    while (this.running < PARALLEL && this.waiting.length) {
      const { task, resolve, reject } = this.waiting.shift();
      this.running += 1;
      task()
        .then(resolve, reject)
        .finally(() => {
          this.running -= 1;
          this.next();
        });
    }
  }
}

export class LineageTree {
  /** `ask(method, path, options)` is the page's request (tests of the drawing may pass their own). */
  constructor({ ask = request } = {}) {
    this.ask = ask;
    this.queue = new Queue();
    this.element = document.createElement("figure");
    this.element.className = "lineage-tree";
    this.canvas = svg("svg", { role: "group", "aria-label": "lineage tree" });
    this.status = document.createElement("figcaption");
    this.status.className = "muted tree-status";
    this.scroller = document.createElement("div");
    this.scroller.className = "tree-scroll";
    this.scroller.append(this.canvas);
    this.element.append(this.status, this.scroller);
    this.scroller.addEventListener("scroll", () => this.scrolled(), { passive: true });
    this.turns = new Map(); // "parent id|seed length" -> the fork point's turn (a number), its event's type, or null
    this.pending = 0;
    this.scheduled = false;
    this.lastDrawMs = null;
    this.drawnAt = 0;
  }

  /** Shows `session`'s tree; `lineage` is its GET …/lineage answer (the page has it already). */
  show(session, lineage) {
    this.root = this.node(session, 0);
    this.root.children = lineage.children.map((child) => this.node(child, 1));
    this.root.more = lineage.children.length >= 1000; // the route answers at most 1000
    this.ancestors = lineage.ancestors.map((ancestor) => ({ session: ancestor }));
    this.missing = lineage.missingAncestor;
    this.requestTurns();
    this.fillVisible();
    this.draw();
  }

  node(session, depth) {
    return { session, depth, children: null, expanded: false, more: false, failed: false };
  }

  visibleChildren(node) {
    if (!node.children) return [];
    return node.expanded ? node.children : node.children.slice(0, SHOWN[node.depth + 1]);
  }

  /** Asks the children of every node on screen that has not been asked yet (not those at the last depth). */
  fillVisible() {
    const walk = (node) => {
      if (node.depth >= DEPTH) return;
      if (node.children === null && !node.asked) this.askChildren(node);
      for (const child of this.visibleChildren(node)) walk(child);
    };
    walk(this.root);
  }

  askChildren(node) {
    node.asked = true;
    this.track(
      this.queue
        .run(() => this.ask("GET", sessionPath(node.session.id, "/lineage")))
        .then((lineage) => {
          node.children = lineage.children.map((child) => this.node(child, node.depth + 1));
          node.more = lineage.children.length >= 1000;
          this.requestTurns();
          this.fillVisible();
        })
        .catch(() => {
          node.children = [];
          node.failed = true; // deleted meanwhile, or refused: the node stays, without children
        }),
    );
  }

  /** The fork points not known yet of every node on screen. */
  requestTurns() {
    const ask = (session, parentId) => {
      const length = session.seedLength;
      if (!Number.isInteger(length) || length < 1) return;
      // A seed is a copy of its parent's log: the seed's last event is the parent's event at that seq (a gone
      // parent's is the child's own copy).
      const from = parentId ?? session.id;
      const key = `${from}|${length}`;
      if (this.turns.has(key)) return;
      this.turns.set(key, undefined);
      this.track(
        this.queue
          .run(() => this.ask("GET", sessionPath(from, "/events"), { query: { from: length - 1, limit: 1 } }))
          .then((page) => {
            const event = page.events[0];
            this.turns.set(key, event?.type === "turn/end" && Number.isInteger(event.data?.turn) ? event.data.turn : (event?.type ?? null));
          })
          .catch(() => this.turns.set(key, null)),
      );
    };
    const chain = [this.root.session, ...this.ancestors.map((ancestor) => ancestor.session)];
    chain.forEach((session, at) => ask(session, chain[at + 1]?.id ?? null));
    const walk = (node) => {
      for (const child of this.visibleChildren(node)) {
        ask(child.session, node.session.id);
        walk(child);
      }
    };
    walk(this.root);
  }

  forkTurn(session, parentId) {
    const from = parentId ?? session.id;
    return this.turns.get(`${from}|${session.seedLength}`);
  }

  /** Redraws once the request settles (many answers arriving together make one draw). */
  track(promise) {
    this.pending += 1;
    promise.finally(() => {
      this.pending -= 1;
      this.redrawSoon();
    });
  }

  redrawSoon() {
    if (this.scheduled || this.disposed) return;
    this.scheduled = true;
    const wait = this.pending ? Math.max(0, REDRAW_MS - (performance.now() - this.drawnAt)) : 0;
    setTimeout(() => requestAnimationFrame(() => {
      this.scheduled = false;
      this.draw();
    }), wait);
  }

  /** The page shows another session: no more requests for this tree. */
  dispose() {
    this.disposed = true;
    this.queue.clear();
  }

  expand(node) {
    node.expanded = true;
    this.requestTurns();
    this.fillVisible();
    this.draw();
  }

  /** The rows top to bottom: the missing ancestor, the ancestors from the root, the session, its descendants. */
  rows() {
    const rows = [];
    if (this.missing) rows.push({ kind: "missing", indent: 0, id: this.missing });
    const chain = [...this.ancestors].reverse();
    chain.forEach((ancestor, at) => {
      rows.push({ kind: "ancestor", indent: 0, session: ancestor.session, parentId: chain[at - 1]?.session.id ?? null });
    });
    rows.push({ kind: "self", indent: 0, session: this.root.session, parentId: chain.at(-1)?.session.id ?? null });
    const walk = (node, parentRow) => {
      for (const child of this.visibleChildren(node)) {
        const row = { kind: "child", indent: child.depth, session: child.session, parentId: node.session.id, parentRow };
        rows.push(row);
        walk(child, row);
      }
      const hidden = (node.children?.length ?? 0) - this.visibleChildren(node).length;
      if (hidden > 0 || (node.expanded && node.more)) {
        rows.push({ kind: "more", indent: node.depth + 1, node, hidden, parentRow });
      }
    };
    const selfRow = rows.at(-1);
    walk(this.root, selfRow);
    return rows;
  }

  factsOf(row) {
    const s = row.session;
    const parts = [];
    if (row.kind !== "self" && row.kind !== "missing") parts.push(s.id);
    if (Number.isInteger(s.seedLength) && (s.parentSession || row.kind === "child")) {
      const turn = this.forkTurn(s, row.parentId);
      const at = typeof turn === "number" ? ` · after turn ${turn}` : typeof turn === "string" ? ` · at ${turn}` : "";
      parts.push(`forked at seed ${formatCount(s.seedLength)}${at}`);
    } else if (row.kind !== "missing") {
      parts.push(s.parentSession ? "forked" : "root");
    }
    parts.push(`${formatCount(s.eventCount)} events`);
    return parts.join(" · ");
  }

  /** The text of each row (strings only: every row is described, only the rows in view become elements). */
  describe(row) {
    if (row.kind === "more") {
      row.label = row.hidden > 0 ? `+${formatCount(row.hidden)} more` : "more than 1,000: list them";
      row.facts = "";
    } else if (row.kind === "missing") {
      row.label = `${row.id} (gone)`;
      row.facts = "deleted, or never in this store";
    } else {
      row.full = nodeLabel(row.session);
      row.label = shorten(row.full.replace(/\s+/g, " "), LABEL_POINTS);
      row.facts = this.factsOf(row);
    }
    return row.x + 16 + Math.max(row.label.length * 8.2, row.facts.length * 7);
  }

  /** The rows whose elements are made: all of a small tree; of a large one, those within a screen of the view. */
  drawnRange(count) {
    if (count <= WINDOW_FROM) return [0, count];
    const view = this.scroller.clientHeight || 512;
    const top = this.scroller.scrollTop;
    return [Math.max(0, Math.floor((top - view) / ROW)), Math.min(count, Math.ceil((top + 2 * view) / ROW))];
  }

  /** Draws the tree from what is known now; leaves a performance measure and returns its milliseconds. */
  draw() {
    const start = performance.now();
    const rows = this.rows();
    let width = 0;
    rows.forEach((row, at) => {
      row.y = at * ROW + 14;
      row.x = 12 + row.indent * INDENT;
      width = Math.max(width, this.describe(row));
    });
    const [first, last] = this.drawnRange(rows.length);
    // Nothing on screen changed (an answer that added nothing): the elements stay, so a click under way is not lost.
    const signature = `${first}:${last}:${rows.map((row) => `${row.kind}|${row.indent}|${row.label}|${row.facts}`).join("\n")}`;
    if (signature === this.signature) {
      this.finish(start, rows, last - first);
      return performance.now() - start;
    }
    this.signature = signature;
    const top = first * ROW;
    const bottom = last * ROW;
    const edges = []; // one path for every connector that crosses the drawn rows
    let previousSpine = null;
    for (const row of rows) {
      const from = row.kind === "child" || row.kind === "more" ? row.parentRow : previousSpine;
      if (from && from.y < bottom && row.y > top) {
        edges.push(from === row.parentRow ? `M${from.x} ${from.y + 6}V${row.y}H${row.x - (row.kind === "more" ? 2 : 6)}` : `M${row.x} ${from.y + 6}V${row.y - 6}`);
      }
      if (row.kind !== "child" && row.kind !== "more") previousSpine = row;
    }
    const fragment = document.createDocumentFragment();
    fragment.append(svg("path", { class: "tree-edges", d: edges.join("") }));
    for (let at = first; at < last; at += 1) fragment.append(this.rowElement(rows[at]));
    const height = rows.length * ROW;
    width = Math.ceil(width);
    this.canvas.setAttribute("width", String(width));
    this.canvas.setAttribute("height", String(height));
    this.canvas.setAttribute("viewBox", `0 0 ${width} ${height}`);
    this.canvas.replaceChildren(fragment);
    this.canvas.getBBox(); // lays the drawing out now, so that the measure counts it
    return this.finish(start, rows, last - first);
  }

  /** The caption, the measure and the facts a test reads, after a draw. */
  finish(start, rows, drawn) {
    const descendants = rows.filter((row) => row.kind === "child").length;
    const ancestors = rows.filter((row) => row.kind === "ancestor").length;
    const plural = (count, one, many) => `${formatCount(count)} ${count === 1 ? one : many}`;
    this.status.textContent = `${plural(ancestors, "ancestor", "ancestors")} · ${plural(descendants, "descendant", "descendants")} shown${this.pending ? " · reading…" : ""}`;
    const ms = performance.now() - start;
    performance.measure(DRAW_MEASURE, { start, duration: ms, detail: { rows: rows.length, drawn, descendants } });
    this.lastDrawMs = ms;
    this.drawnAt = performance.now();
    this.element.dataset.rows = String(rows.length);
    this.element.dataset.pending = String(this.pending);
    return ms;
  }

  /** A large tree scrolled: the rows now in view are drawn (once a frame). */
  scrolled() {
    if (this.rowCount() <= WINDOW_FROM || this.scrolling) return;
    this.scrolling = true;
    requestAnimationFrame(() => {
      this.scrolling = false;
      this.draw();
    });
  }

  rowCount() {
    return Number(this.element.dataset.rows ?? 0);
  }

  rowElement(row) {
    const { x, y } = row;
    if (row.kind === "more") {
      const label = row.label;
      const group = svg("g", { class: "tree-more", role: "button", tabindex: 0, "aria-label": `${label} children of ${row.node.session.id}` });
      const activate = () => (row.hidden > 0 ? this.expand(row.node) : (location.hash = `#/?parent=${encodeURIComponent(row.node.session.id)}&order=created`));
      group.addEventListener("click", activate);
      group.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          activate();
        }
      });
      group.append(svg("rect", { x: x - 4, y: y - 12, width: label.length * 9.5 + 12, height: 24, rx: 4 }), svg("text", { x: x + 4, y: y + 5 }, label));
      return group;
    }
    if (row.kind === "missing") {
      const group = svg("g", { class: "tree-node tree-missing" });
      group.append(svg("circle", { cx: x, cy: y, r: 5 }), svg("text", { x: x + 12, y: y + 5, class: "tree-label" }, row.label));
      group.append(svg("text", { x: x + 12, y: y + 22, class: "tree-facts" }, row.facts));
      return group;
    }
    const s = row.session;
    const { full, label, facts } = row;
    const group = svg("g", { class: `tree-node tree-${row.kind}`, "data-id": s.id });
    if (label.length < full.length) group.append(svg("title", {}, full)); // the whole of a label cut short
    group.append(svg("circle", { cx: x, cy: y, r: row.kind === "self" ? 7 : 5 }));
    const text = svg("text", { x: x + 12, y: y + 5, class: "tree-label" }, label);
    if (row.kind === "self") {
      text.setAttribute("aria-current", "page");
      group.append(text);
    } else {
      const link = svg("a", { href: sessionHref(s.id) });
      link.append(text);
      group.append(link);
    }
    group.append(svg("text", { x: x + 12, y: y + 22, class: "tree-facts" }, facts));
    return group;
  }
}
