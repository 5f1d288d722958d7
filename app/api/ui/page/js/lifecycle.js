// A session's turn lifecycle (spec 17) on its page: its stats and token usage, "Interrupt turn" while a turn is
// open, and "Archive" / "Unarchive". The figures come with the Session; while events arrive live the session is
// read again (once the events pause) so that they stay current.

import { request, sessionPath } from "./api.js";
import { formatCount, h, replaceChildren } from "./dom.js";

const REFRESH_AFTER_MS = 400; // how long live events must pause before the figures are read again

// The usage members DSH's chunks carry, in the order shown; any other member follows, by its name.
const USAGE_LABELS = {
  inputTokens: "Input",
  outputTokens: "Output",
  cacheReadTokens: "Cache read",
  reasoningTokens: "Reasoning",
};

/** Milliseconds as a person reads them: "850 ms", "12.3 s", "4 min 05 s". */
export function formatDuration(ms) {
  if (!Number.isFinite(ms)) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60_000);
  const seconds = Math.round((ms % 60_000) / 1000);
  return `${minutes} min ${String(seconds).padStart(2, "0")} s`;
}

/** A usage object's members as [label, value] rows: the known ones first, then the others by name. */
export function usageRows(usage) {
  const known = Object.keys(USAGE_LABELS).filter((name) => name in usage);
  const others = Object.keys(usage)
    .filter((name) => !(name in USAGE_LABELS))
    .sort();
  return [...known, ...others].map((name) => [USAGE_LABELS[name] ?? name, usage[name]]);
}

const sameUsage = (one, other) => JSON.stringify(usageRows(one)) === JSON.stringify(usageRows(other));

export class LifecycleView {
  /**
   * `onChange(session)` is told the session as the server answered an action or a refresh; `showProblem(problem)`
   * shows an action's problem (null clears it).
   */
  constructor(sessionId, { onChange, showProblem, notify }) {
    this.sessionId = sessionId;
    this.onChange = onChange;
    this.showProblem = showProblem;
    this.notify = notify;
    this.session = null;
    this.timer = null;
    this.badge = h("span", { class: "archived-badge", hidden: true }, "Archived");
    this.interruptButton = h(
      "button",
      { type: "button", class: "interrupt", hidden: true, onclick: () => this.interrupt(), title: "close the open turn as an interrupted one" },
      "Interrupt turn",
    );
    this.archiveButton = h("button", { type: "button", class: "archive", onclick: () => this.toggleArchived() }, "Archive");
    this.statsBox = h("section", { class: "stats", "aria-label": "stats and usage" });
  }

  render(session, { deleted = false } = {}) {
    this.session = session;
    const archived = session.archived === true;
    this.badge.hidden = !archived;
    this.archiveButton.textContent = archived ? "Unarchive" : "Archive";
    this.archiveButton.title = archived ? "show it in the session list again" : "hide it from the session list (nothing is deleted)";
    this.archiveButton.disabled = deleted;
    this.interruptButton.hidden = deleted || session.openTurn === null || session.openTurn === undefined;
    this.renderStats(session);
  }

  renderStats(session) {
    const stats = session.stats;
    const usage = session.usage ?? {};
    const own = session.ownUsage ?? {};
    if (!stats) {
      replaceChildren(this.statsBox); // a server without spec 17's members
      return;
    }
    const fact = (term, value) => h("div", { class: "fact" }, h("dt", {}, term), h("dd", {}, value));
    const ttft = stats.ttftSteps ? formatDuration(stats.ttftMs / stats.ttftSteps) : "–";
    const decode = stats.decodeMs > 0 ? `${(stats.decodeTokens / (stats.decodeMs / 1000)).toFixed(1)} tokens/s` : "–";
    const usageTable = (caption, sums) =>
      h(
        "table",
        { class: "usage" },
        h("caption", {}, caption),
        h("tbody", {}, usageRows(sums).map(([label, value]) => h("tr", {}, h("th", { scope: "row" }, label), h("td", { class: "number" }, formatCount(value))))),
      );
    const forked = session.parentSession && !sameUsage(usage, own);
    replaceChildren(
      this.statsBox,
      h("h2", {}, "Stats"),
      h(
        "dl",
        { class: "facts stats-facts" },
        fact("Turns", formatCount(stats.turns)),
        fact("Steps", formatCount(stats.steps)),
        fact("Model time", formatDuration(stats.llmMs)),
        fact("Tool time", formatDuration(stats.toolMs)),
        fact("First token", ttft),
        fact("Decoding", decode),
      ),
      usageRows(usage).length
        ? [
            usageTable("Tokens, whole log", usage),
            forked ? usageTable("Tokens, this session's own (after its seed)", own) : null,
          ]
        : h("p", { class: "muted no-usage" }, "No token usage reported yet."),
    );
  }

  /** Events arrived live: read the session again once they pause (its stats and usage moved). */
  eventsArrived() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.refresh(), REFRESH_AFTER_MS);
  }

  async refresh() {
    try {
      this.onChange(await request("GET", sessionPath(this.sessionId)));
    } catch {
      // the live state shows what went wrong (a deleted session, a lost key)
    }
  }

  async interrupt() {
    // What the page shows now (the live tail may change the session while the request runs).
    const { eventCount, instance, openTurn } = this.session;
    this.showProblem(null);
    this.interruptButton.disabled = true;
    try {
      // At the log length shown: a turn that moved meanwhile is not interrupted behind the reader's back.
      const answer = await request("POST", sessionPath(this.sessionId, "/interrupt"), { body: { expectedSeq: eventCount, instance } });
      this.notify(`Interrupted turn ${openTurn} of ${this.sessionId}: ${answer.events.length} events closed it.`);
      this.onChange(answer.session);
    } catch (problem) {
      this.showProblem(problem);
    } finally {
      this.interruptButton.disabled = false;
    }
  }

  async toggleArchived() {
    const archived = this.session.archived !== true;
    this.showProblem(null);
    this.archiveButton.disabled = true;
    try {
      const session = await request("PATCH", sessionPath(this.sessionId), { body: { archived, instance: this.session.instance } });
      this.notify(archived ? `Archived ${this.sessionId}: the session list hides it unless “Show archived” is on.` : `Unarchived ${this.sessionId}.`);
      this.onChange(session);
    } catch (problem) {
      this.showProblem(problem);
    } finally {
      this.archiveButton.disabled = false;
    }
  }

  dispose() {
    clearTimeout(this.timer);
  }
}
