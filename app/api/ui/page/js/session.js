// One session: its facts, lineage and actions, then the conversation or the raw events, kept up to date by the
// live tail. The view lives while the page shows this session (switching tabs keeps it); dispose() ends the tail.

import { onKeyChange, request, sessionPath } from "./api.js";
import { ConversationView } from "./conversation.js";
import { confirmDelete, editDialog, forkDialog } from "./dialogs.js";
import { formatCount, formatTime, h, replaceChildren, sessionHref, sessionLink } from "./dom.js";
import { EventsView } from "./events.js";
import { LifecycleView } from "./lifecycle.js";
import { LiveState, LiveTail } from "./live.js";
import { Conversation, LogIndex } from "./model.js";
import { problemBox } from "./problem.js";

const SCAN_PAGE = 10000; // the events route's largest page
const LIVE_LABELS = {
  [LiveState.CONNECTING]: "Connecting…",
  [LiveState.LIVE]: "Live",
  [LiveState.RECONNECTING]: "Reconnecting…",
  [LiveState.STOPPED]: "Not live",
  [LiveState.DELETED]: "Deleted",
};

export class SessionView {
  constructor(root, id, { navigate, notify }) {
    this.root = root;
    this.id = id;
    this.navigate = navigate;
    this.notify = notify;
    this.session = null;
    this.lineage = null;
    this.tail = null;
    this.tab = null;
    this.disposed = false;
    this.conversation = null;
  }

  /** Shows `tab` ("" for the conversation, "events"); `params` holds the events tab's `from`. */
  async open(tab, params) {
    // One load however many route changes arrive while it runs (a tab clicked before the session answered).
    this.loading ??= this.load();
    await this.loading;
    if (!this.session || this.disposed) return;
    this.showTab(tab, params);
  }

  async load() {
    replaceChildren(this.root, h("p", { class: "muted loading" }, `Opening ${this.id}…`));
    try {
      this.session = await request("GET", sessionPath(this.id));
    } catch (problem) {
      replaceChildren(this.root, h("h1", { tabindex: -1 }, this.id), problemBox(problem), h("p", {}, h("a", { href: "#/" }, "Back to the sessions")));
      this.root.querySelector("h1").focus();
      this.loading = null; // the next visit asks again
      return;
    }
    this.buildFrame();
    this.renderFacts();
    this.loadLineage();
    this.conversationLoad = this.loadConversation();
    // A new key (or none) means a new stream URL: its ?access_token= is the key.
    this.unsubscribe = onKeyChange(() => this.tail?.start());
  }

  buildFrame() {
    this.heading = h("h1", { tabindex: -1, class: "session-title" }, this.id);
    this.liveBadge = h("span", { class: "live-state", role: "status", "aria-live": "polite", dataset: { state: LiveState.CONNECTING } }, LIVE_LABELS[LiveState.CONNECTING]);
    this.reconnect = h("button", { type: "button", class: "reconnect", hidden: true, onclick: () => this.tail?.start() }, "Reconnect");
    this.liveProblem = h("div", { class: "live-problem" });
    this.ancestry = h("nav", { class: "ancestry", "aria-label": "ancestors" });
    this.facts = h("dl", { class: "facts" });
    this.forkButton = h("button", { type: "button", class: "primary", onclick: () => this.forkLatest() }, "Fork…");
    this.deleteButton = h("button", { type: "button", class: "danger", onclick: () => this.remove() }, "Delete…");
    this.actionProblem = h("div", { class: "action-problem" });
    this.lifecycle = new LifecycleView(this.id, {
      onChange: (session) => this.changed(session),
      showProblem: (problem) => replaceChildren(this.actionProblem, problem ? problemBox(problem) : null),
      notify: this.notify,
    });
    this.lineageBox = h("section", { class: "lineage", "aria-label": "lineage" });
    this.conversationTab = h("a", { class: "tab", href: sessionHref(this.id) }, "Conversation");
    this.eventsTab = h("a", { class: "tab", href: sessionHref(this.id, "events") }, "Events");
    this.conversationPanel = h("section", { class: "panel", id: "conversation-panel", "aria-label": "conversation" });
    this.eventsPanel = h("section", { class: "panel", id: "events-panel", "aria-label": "raw events", hidden: true });
    this.conversationView = new ConversationView(this.conversationPanel, {
      sessionId: this.id,
      onFork: (seq, where) => this.fork(seq, where),
      onEdit: (turn, text, message) => this.editAndFork(turn, text, message),
    });
    this.eventsView = new EventsView(this.eventsPanel, { sessionId: this.id, onFork: (seq, where) => this.fork(seq, where) });
    replaceChildren(
      this.root,
      h(
        "header",
        { class: "session-head" },
        this.ancestry,
        h("div", { class: "title-row" }, this.heading, this.lifecycle.badge, this.liveBadge, this.reconnect),
        this.liveProblem,
        this.facts,
        h("div", { class: "actions" }, this.forkButton, this.lifecycle.interruptButton, this.lifecycle.archiveButton, this.deleteButton),
        this.actionProblem,
        this.lifecycle.statsBox,
      ),
      this.lineageBox,
      h("nav", { class: "tabs", "aria-label": "views of this session" }, this.conversationTab, this.eventsTab),
      this.conversationPanel,
      this.eventsPanel,
    );
  }

  showTab(tab, params) {
    const events = tab === "events";
    this.conversationPanel.hidden = events;
    this.eventsPanel.hidden = !events;
    for (const [link, current] of [
      [this.conversationTab, !events],
      [this.eventsTab, events],
    ]) {
      if (current) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    if (events) {
      const from = params.has("from") ? Number(params.get("from")) : Math.max(0, (this.session?.eventCount ?? 0) - 100);
      this.eventsView.show(from);
    }
    if (this.tab === null) this.heading.focus();
    this.tab = tab;
  }

  renderFacts() {
    const s = this.session;
    const fact = (term, value) => h("div", { class: "fact" }, h("dt", {}, term), h("dd", {}, value));
    replaceChildren(
      this.facts,
      fact("Events", formatCount(s.eventCount)),
      fact("Open turn", s.openTurn === null ? "none" : `turn ${s.openTurn}`),
      fact("Forkable", s.forkable ? "yes" : "no"),
      fact("Last event", s.lastEventType ?? "none"),
      fact("Created", formatTime(s.createdAt)),
      s.cwd ? fact("cwd", h("code", {}, s.cwd)) : null,
      s.parentSession
        ? fact("Parent", [sessionLink(s.parentSession), s.seedLength !== null ? ` (seed of ${formatCount(s.seedLength)} events)` : ""])
        : null,
      s.origin ? fact("Origin", s.origin) : null,
      s.agentPreset ? fact("Agent preset", s.agentPreset) : null,
      fact("Instance", h("code", { class: "instance" }, s.instance)),
    );
    const forkable = s.eventCount === 0 || s.lastTurnEndSeq !== null;
    this.forkButton.disabled = !forkable || this.deleted;
    this.forkButton.title = forkable ? "" : "no turn has ended yet: nothing to fork";
    this.deleteButton.disabled = Boolean(this.deleted);
    this.conversationView.setOpenTurn(this.deleted ? null : s.openTurn);
    this.lifecycle.render(s, { deleted: Boolean(this.deleted) });
  }

  /** The session as the server answered an archive, an interrupt or a refresh (never behind the live tail). */
  changed(session) {
    if (this.deleted || session.eventCount < this.session.eventCount) return;
    this.session = session;
    this.renderFacts();
  }

  async loadLineage() {
    try {
      this.lineage = await request("GET", sessionPath(this.id, "/lineage"));
    } catch (problem) {
      replaceChildren(this.lineageBox, problemBox(problem));
      return;
    }
    const { ancestors, children, missingAncestor } = this.lineage;
    const chain = [...ancestors].reverse();
    replaceChildren(
      this.ancestry,
      h("a", { href: "#/" }, "Sessions"),
      missingAncestor ? [" › ", h("span", { class: "missing", title: "deleted, or never in this store" }, `${missingAncestor} (gone)`)] : null,
      chain.map((ancestor) => [" › ", sessionLink(ancestor.id)]),
      " › ",
      h("span", { "aria-current": "page" }, this.id),
    );
    const childLinks = children.map((child) =>
      h("li", {}, sessionLink(child.id), h("span", { class: "muted" }, ` seed ${formatCount(child.seedLength ?? 0)} · ${formatCount(child.eventCount)} events`)),
    );
    replaceChildren(
      this.lineageBox,
      h("h2", {}, "Lineage"),
      h(
        "p",
        {},
        "Parent: ",
        this.session.parentSession
          ? missingAncestor === this.session.parentSession
            ? h("span", { class: "missing" }, `${missingAncestor} (gone)`)
            : sessionLink(this.session.parentSession, { class: "session-id parent-link" })
          : h("span", { class: "muted" }, "none (a root session)"),
      ),
      ancestors.length > 1 ? h("p", { class: "muted" }, `${ancestors.length} ancestors: ${chain.map((a) => a.id).join(" › ")}`) : null,
      h("h3", {}, `Children (${children.length}${children.length >= 1000 ? "+" : ""})`),
      children.length ? h("ul", { class: "children" }, childLinks) : h("p", { class: "muted" }, "No children."),
      children.length ? h("p", {}, h("a", { href: `#/?parent=${encodeURIComponent(this.id)}&order=created` }, "List the children page by page")) : null,
    );
  }

  /** The history, the log's boundaries and surface ops (read in pages), then the live tail from the end. */
  async loadConversation() {
    const progress = h("p", { class: "muted loading", role: "status" }, "Reading the history…");
    replaceChildren(this.conversationPanel, progress);
    try {
      const history = await request("GET", sessionPath(this.id, "/history"));
      const end = history.eventCount;
      const index = new LogIndex();
      for (let from = 0; from < end && !this.disposed; ) {
        progress.textContent = `Reading the log: ${formatCount(from)} of ${formatCount(end)} events…`;
        const page = await request("GET", sessionPath(this.id, "/events"), { query: { from, limit: Math.min(SCAN_PAGE, end - from) } });
        if (page.events.length === 0) break;
        for (const event of page.events) if (event.seq < end) index.add(event);
        from = page.nextSeq;
      }
      if (this.disposed) return;
      this.conversation = new Conversation(history.messages, index);
      this.conversationView.show(this.conversation);
      this.conversationView.setOpenTurn(this.session.openTurn);
      this.startTail(end);
    } catch (problem) {
      replaceChildren(this.conversationPanel, problemBox(problem));
    }
  }

  startTail(from) {
    this.tail?.stop();
    this.tail = new LiveTail(this.id, from, { onEvent: (event) => this.live(event), onState: (state) => this.liveState(state) });
    this.tail.start();
  }

  live(event) {
    const s = this.session;
    s.eventCount = Math.max(s.eventCount, event.seq + 1);
    s.lastEventType = event.type;
    if (event.type === "turn/start") s.openTurn = event.data?.turn ?? s.openTurn;
    if (event.type === "turn/end") {
      s.openTurn = null;
      s.lastTurnEndSeq = event.seq;
    }
    s.forkable = event.type === "turn/end";
    this.renderFacts();
    this.lifecycle.eventsArrived();
    this.eventsView.live(event);
    const change = this.conversation.apply(event);
    if (change.reload) {
      this.tail.stop();
      this.loadConversation();
      return;
    }
    this.conversationView.update(change);
  }

  async liveState(state) {
    this.liveBadge.dataset.state = state;
    this.liveBadge.textContent = LIVE_LABELS[state];
    this.reconnect.hidden = state !== LiveState.STOPPED;
    replaceChildren(this.liveProblem);
    if (state === LiveState.DELETED) {
      this.deleted = true;
      this.renderFacts();
      // Deleted from this page: remove() says so itself; from elsewhere: say it here.
      if (!this.removing) this.notify(`Session ${this.id} was deleted by another client.`);
    }
    if (state === LiveState.STOPPED) {
      // The browser does not say why a stream was refused: ask the session itself, which answers the problem.
      try {
        await request("GET", sessionPath(this.id));
        replaceChildren(this.liveProblem, h("p", { class: "muted" }, "The live stream closed; Reconnect resumes it."));
      } catch (problem) {
        replaceChildren(this.liveProblem, problemBox(problem));
      }
    }
  }

  /** The header's button: fork at the last turn/end (the whole log when it ends there), or an empty log. */
  forkLatest() {
    const s = this.session;
    if (s.eventCount === 0) return this.fork(null, "its start (an empty log)");
    const open = s.lastTurnEndSeq !== s.eventCount - 1;
    return this.fork(s.lastTurnEndSeq, `the last turn/end (seq ${s.lastTurnEndSeq})${open ? ", before the events after it" : ""}`);
  }

  async fork(atSeq, where) {
    const child = await forkDialog({
      sessionId: this.id,
      atSeq,
      where,
      fork: (childId, seq) => {
        const body = {};
        if (seq !== null) body.atSeq = seq;
        if (childId) body.sessionId = childId;
        return request("POST", sessionPath(this.id, "/fork"), { body });
      },
    });
    if (child) {
      this.notify(`Forked ${this.id} at ${where} into ${child.id}.`);
      this.navigate(sessionHref(child.id));
    }
  }

  /** Edit the user message of `turn` and regenerate from there (spec 12): one fork with atTurn and the events. */
  async editAndFork(turn, text, message) {
    const child = await editDialog({
      sessionId: this.id,
      where: `turn ${turn}`,
      text,
      fork: (edited) => {
        const id = `edit-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
        const source = message?.source && typeof message.source === "object" ? message.source : { kind: "user" };
        const events = [
          { type: "turn/start", data: { turn } },
          { type: "user/message", surfaceOp: "append", data: { id, role: "user", content: [{ type: "text", text: edited }], source } },
        ];
        return request("POST", sessionPath(this.id, "/fork"), { body: { atTurn: turn - 1, events } });
      },
    });
    if (child) {
      this.notify(`Forked ${this.id} before turn ${turn} with the edited message into ${child.id}.`);
      this.navigate(sessionHref(child.id));
    }
  }

  async remove() {
    const removed = await confirmDelete({
      sessionId: this.id,
      childCount: this.lineage?.children.length ?? 0,
      remove: async () => {
        this.removing = true;
        try {
          await request("DELETE", sessionPath(this.id));
        } catch (problem) {
          this.removing = false;
          throw problem;
        }
      },
    });
    if (removed) {
      this.notify(`Deleted session ${this.id}.`);
      this.navigate("#/");
    }
  }

  dispose() {
    this.disposed = true;
    this.lifecycle?.dispose();
    this.tail?.stop();
    this.unsubscribe?.();
  }
}
