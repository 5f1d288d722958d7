// The conversation panel: a window over the items (never all of a 100k-event session's at once), opened at the
// latest, widened on request, following live events while it shows the end.

import { formatCount, h, replaceChildren } from "./dom.js";
import { boundaryElement, messageElement, resultSlotContent } from "./messages.js";

const STEP = 150; // items rendered per "show earlier" / "show later"
const MOST = 600; // the window never holds more: following a busy session drops the oldest

export class ConversationView {
  constructor(container, { sessionId, onFork, onEdit }) {
    this.container = container;
    this.sessionId = sessionId;
    this.onFork = onFork;
    this.onEdit = onEdit;
    this.turns = { of: new Map(), ended: new Set() }; // a user message's turn, and the turns that have ended
    this.conversation = null;
    this.slots = new Map(); // call id -> its result's element, for results that arrive later
    this.lo = 0;
    this.hi = 0;
    this.list = h("ol", { class: "conversation", "aria-label": "conversation" });
    this.earlier = h("div", { class: "window-controls" });
    this.later = h("div", { class: "window-controls" });
    this.openTurn = h("p", { class: "open-turn", role: "status", hidden: true });
    this.summary = h("p", { class: "window-summary muted" });
  }

  /** Shows `conversation`, its latest items. */
  show(conversation) {
    this.conversation = conversation;
    this.learnTurns(conversation.items);
    const count = conversation.items.length;
    this.lo = Math.max(0, count - STEP);
    this.hi = count;
    replaceChildren(this.container, this.summary, this.earlier, this.list, this.later, this.openTurn);
    this.renderWindow();
  }

  /** Which turn each user message opened, and which turns have ended ("Edit and fork" needs an ended turn). */
  learnTurns(items) {
    let turn = null;
    for (const item of items) {
      if (item.kind === "turn-start") turn = item.turn;
      else if (item.kind === "turn-end") this.turns.ended.add(item.turn);
      else if (item.kind === "message" && item.message?.role === "user" && turn !== null) this.turns.of.set(item.seq, turn);
    }
  }

  /** The turn a user message may be edited in (an ended one), or null. */
  editableTurn(item) {
    const turn = this.turns.of.get(item.seq);
    return turn !== undefined && this.turns.ended.has(turn) && Number.isInteger(turn) && turn >= 1 ? turn : null;
  }

  element(item) {
    const context = {
      sessionId: this.sessionId,
      conversation: this.conversation,
      slots: this.slots,
      onFork: this.onFork,
      onEdit: this.onEdit,
      editableTurn: (message) => this.editableTurn(message),
    };
    return item.kind === "message" ? messageElement(item, context) : boundaryElement(item, context);
  }

  renderWindow() {
    this.slots.clear();
    const items = this.conversation.items.slice(this.lo, this.hi);
    replaceChildren(this.list, items.map((item) => this.element(item)));
    if (items.length === 0) this.list.append(h("li", { class: "item muted empty" }, "No messages yet."));
    this.renderControls();
  }

  renderControls() {
    const count = this.conversation.items.length;
    const button = (label, onclick) => h("button", { type: "button", onclick }, label);
    replaceChildren(
      this.earlier,
      this.lo > 0 ? [button(`Show ${formatCount(Math.min(STEP, this.lo))} earlier`, () => this.showEarlier()), button("First", () => this.jump(0))] : null,
    );
    replaceChildren(
      this.later,
      this.hi < count ? [button(`Show ${formatCount(Math.min(STEP, count - this.hi))} later`, () => this.showLater()), button("Latest", () => this.jump(count))] : null,
    );
    this.summary.textContent = count
      ? `Items ${formatCount(this.lo + 1)}–${formatCount(this.hi)} of ${formatCount(count)} (messages and turn boundaries)`
      : "";
  }

  showEarlier() {
    const anchor = this.list.firstElementChild;
    const before = anchor?.getBoundingClientRect().top ?? 0;
    const from = Math.max(0, this.lo - STEP);
    const elements = this.conversation.items.slice(from, this.lo).map((item) => this.element(item));
    this.list.prepend(...elements);
    this.lo = from;
    // Keep what the reader was looking at where it was.
    if (anchor) window.scrollBy(0, anchor.getBoundingClientRect().top - before);
    elements[elements.length - 1]?.querySelector("button, a, summary")?.focus({ preventScroll: true });
    this.renderControls();
  }

  showLater() {
    const to = Math.min(this.conversation.items.length, this.hi + STEP);
    this.list.append(...this.conversation.items.slice(this.hi, to).map((item) => this.element(item)));
    this.hi = to;
    this.renderControls();
  }

  /** Jumps to the first items (`at` 0) or the latest (`at` = the count). */
  jump(at) {
    const count = this.conversation.items.length;
    this.lo = at === 0 ? 0 : Math.max(0, count - STEP);
    this.hi = at === 0 ? Math.min(count, STEP) : count;
    this.renderWindow();
    (at === 0 ? this.list.firstElementChild : this.list.lastElementChild)?.scrollIntoView({ block: "nearest" });
  }

  /** What a live event changed (Conversation.apply's answer). */
  update(change) {
    if (change.rebuilt) {
      this.show(this.conversation);
      return;
    }
    if (change.paired) {
      const slot = this.slots.get(change.paired);
      if (slot) replaceChildren(slot, resultSlotContent(this.conversation.results.get(change.paired)));
      return;
    }
    if (!change.appended) return;
    const ended = change.appended.filter((item) => item.kind === "turn-end").map((item) => item.turn);
    this.learnTurns(change.appended);
    if (ended.length) {
      // A turn that ended just now: its user messages may be edited from now on.
      for (const element of this.list.querySelectorAll(".message-user")) {
        const seq = Number(element.dataset.seq);
        if (ended.includes(this.turns.of.get(seq)) && !element.querySelector(".edit-fork")) {
          const item = this.conversation.items.find((candidate) => candidate.kind === "message" && candidate.seq === seq);
          if (item) element.replaceWith(this.element(item));
        }
      }
    }
    const count = this.conversation.items.length;
    const atEnd = this.hi === count - change.appended.length;
    if (!atEnd) {
      this.renderControls();
      return;
    }
    const follow = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 80;
    this.list.querySelector(".empty")?.remove();
    this.list.append(...change.appended.map((item) => this.element(item)));
    this.hi = count;
    while (this.hi - this.lo > MOST) {
      this.list.firstElementChild?.remove();
      this.lo += 1;
    }
    this.renderControls();
    if (follow) this.list.lastElementChild?.scrollIntoView({ block: "end" });
  }

  /** The open turn's note under the conversation (null: no turn is open). */
  setOpenTurn(turn) {
    this.openTurn.hidden = turn === null || turn === undefined;
    this.openTurn.textContent = this.openTurn.hidden ? "" : `Turn ${turn} is open: waiting for its turn/end.`;
  }
}
