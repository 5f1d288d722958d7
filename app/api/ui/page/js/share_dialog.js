// "Share…" (spec 18): a read-only link to the session, made with the spec's choices (up to the last turn/end now,
// live, or a chosen turn; how long it lasts; what it hides), its link shown once with a copy button, and the
// session's shares, each with "Revoke".
//
// Whether the key may share is asked of the service itself: GET …/shares answers the list to a key with the
// `share` (or `admin`) scope and 403 to any other, so the button shows only where the list came back.

import { request, sessionPath } from "./api.js";
import { formatTime, h, replaceChildren } from "./dom.js";
import { asProblem, problemBox } from "./problem.js";

// The durations offered (ISO 8601, as the route takes them; at most P365D).
export const EXPIRIES = [
  ["P1D", "1 day"],
  ["P7D", "7 days"],
  ["P30D", "30 days"],
  ["P90D", "90 days"],
  ["P365D", "365 days"],
];
const DEFAULT_EXPIRY = "P30D";
// What a share may hide, with what each hides (spec 18's `redact`).
export const REDACTIONS = [
  ["reasoning", "Reasoning", "the model's reasoning blocks and chunks"],
  ["tools", "Tool calls and results", "each call's arguments and each result's content, shown as [redacted]"],
  ["cwd", "Working directory", "the session's cwd"],
  ["meta", "Header details", "every header member but createdAt and the title"],
];

const upToText = (upTo) => (upTo === "live" ? "live (follows the session)" : `seq ${upTo}`);

export class ShareDialog {
  /**
   * `session()`: the session as the page knows it now; `turnEnds()`: its turn/ends ({seq, turn, reason}) known to
   * the page, oldest first.
   */
  constructor({ sessionId, session, turnEnds }) {
    this.sessionId = sessionId;
    this.session = session;
    this.turnEnds = turnEnds;
    this.dialog = null;
  }

  /** True when this key may share this session (the list answered); the list is kept for the dialog. */
  async allowed() {
    try {
      this.shares = (await request("GET", sessionPath(this.sessionId, "/shares"))).items;
      return true;
    } catch {
      return false;
    }
  }

  build() {
    const radio = (value, label, extra = null) =>
      h("label", { class: "choice" }, h("input", { type: "radio", name: "share-up-to", value, checked: value === "head" }), ` ${label}`, extra);
    this.headLabel = h("span", { class: "muted" });
    this.turnSelect = h("select", { id: "share-turn", "aria-label": "the turn to share up to" });
    this.expiry = h(
      "select",
      { id: "share-expires" },
      EXPIRIES.map(([value, label]) => h("option", { value, selected: value === DEFAULT_EXPIRY }, label)),
    );
    this.problemArea = h("div", { class: "dialog-problem" });
    this.linkInput = h("input", { id: "share-link", readonly: true, spellcheck: "false", "aria-label": "the share link" });
    this.copyState = h("span", { class: "copy-state muted", role: "status", "aria-live": "polite" });
    this.made = h(
      "section",
      { class: "share-made", hidden: true, "aria-label": "the new link" },
      h("h3", {}, "The link"),
      h("p", { class: "hint" }, "Shown this once: forklog keeps only its hash. Copy it now; anyone who has it reads the shared part without a key."),
      h("div", { class: "share-link-row" }, this.linkInput, h("button", { type: "button", class: "primary copy", onclick: () => this.copy() }, "Copy")),
      this.copyState,
    );
    this.list = h("ul", { class: "share-list" });
    this.submitButton = h("button", { type: "submit", class: "primary" }, "Make the link");
    this.form = h(
      "form",
      { onsubmit: (event) => this.submit(event) },
      h("h2", { id: "share-title" }, "Share ", h("span", { class: "session-id" }, this.sessionId)),
      h("p", {}, "A read-only link: whoever has it reads the conversation without a key, until it expires or is revoked."),
      h(
        "fieldset",
        { class: "share-up-to" },
        h("legend", {}, "Up to"),
        radio("head", "the last turn/end now", [" ", this.headLabel]),
        radio("live", "live: everything, as the session grows"),
        radio("turn", "the end of a turn: ", this.turnSelect),
      ),
      h("label", { for: "share-expires" }, "Expires in"),
      this.expiry,
      h(
        "fieldset",
        { class: "share-redact" },
        h("legend", {}, "Hide"),
        REDACTIONS.map(([value, label, hint]) =>
          h("label", { class: "choice" }, h("input", { type: "checkbox", name: "share-redact", value }), ` ${label} `, h("span", { class: "muted" }, `(${hint})`)),
        ),
      ),
      this.problemArea,
      h("div", { class: "dialog-actions" }, this.submitButton, h("button", { type: "button", onclick: () => this.dialog.close() }, "Close")),
      this.made,
      h("section", { class: "shares", "aria-label": "shares of this session" }, h("h3", {}, "Shares of this session"), this.list),
    );
    this.turnSelect.addEventListener("change", () => {
      this.form.querySelector("input[value='turn']").checked = true;
    });
    this.dialog = h("dialog", { id: "share-dialog", "aria-labelledby": "share-title" }, this.form);
    // The link is shown once: closing the dialog forgets it.
    this.dialog.addEventListener("close", () => {
      this.linkInput.value = "";
      this.made.hidden = true;
    });
    document.body.append(this.dialog);
  }

  async open() {
    if (!this.dialog) this.build();
    const session = this.session();
    this.headLabel.textContent = session.lastTurnEndSeq === null ? "(no turn has ended yet)" : `(seq ${session.lastTurnEndSeq})`;
    const ends = this.turnEnds();
    replaceChildren(
      this.turnSelect,
      ends.length
        ? ends.map((end) => h("option", { value: end.seq }, `turn ${end.turn} (seq ${end.seq}${end.reason?.kind ? `, ${end.reason.kind}` : ""})`))
        : h("option", { value: "" }, "no turn has ended yet"),
    );
    if (ends.length) this.turnSelect.value = String(ends.at(-1).seq);
    replaceChildren(this.problemArea);
    this.renderList();
    this.dialog.showModal();
    this.form.querySelector("input[name='share-up-to']:checked")?.focus();
    await this.refresh();
  }

  /** What the form asks for, as the route's body. */
  body() {
    const choice = this.form.querySelector("input[name='share-up-to']:checked")?.value ?? "head";
    let upTo = choice;
    if (choice === "turn") {
      if (this.turnSelect.value === "") throw { title: "No turn to share up to", detail: "no turn of this session has ended yet", errors: [] };
      upTo = Number(this.turnSelect.value);
    }
    const redact = [...this.form.querySelectorAll("input[name='share-redact']:checked")].map((box) => box.value);
    return { upTo, expiresIn: this.expiry.value, redact };
  }

  async submit(event) {
    event.preventDefault();
    this.submitButton.disabled = true;
    try {
      const made = await request("POST", sessionPath(this.sessionId, "/shares"), { body: this.body() });
      replaceChildren(this.problemArea);
      this.linkInput.value = new URL(made.url ?? `/ui/shared/${made.token}`, location.origin).href;
      this.made.hidden = false;
      replaceChildren(this.copyState);
      this.linkInput.focus();
      this.linkInput.select();
      await this.refresh();
    } catch (error) {
      replaceChildren(this.problemArea, problemBox(asProblem(error)));
    } finally {
      this.submitButton.disabled = false;
    }
  }

  async copy() {
    const link = this.linkInput.value;
    try {
      await navigator.clipboard.writeText(link);
      this.copyState.textContent = "Copied.";
    } catch {
      // No clipboard for this page (an insecure origin, a refused permission): the link is selected for the keys.
      this.linkInput.focus();
      this.linkInput.select();
      this.copyState.textContent = "Selected: copy it with Ctrl+C (⌘C).";
    }
  }

  async refresh() {
    try {
      this.shares = (await request("GET", sessionPath(this.sessionId, "/shares"))).items;
      this.renderList();
    } catch (problem) {
      replaceChildren(this.list, h("li", {}, problemBox(asProblem(problem))));
    }
  }

  renderList() {
    const shares = this.shares ?? [];
    if (!shares.length) {
      replaceChildren(this.list, h("li", { class: "muted" }, "No shares."));
      return;
    }
    replaceChildren(
      this.list,
      shares.map((share) =>
        h(
          "li",
          { class: "share", dataset: { id: share.id } },
          h(
            "div",
            { class: "share-facts" },
            h("code", { class: "share-id" }, share.id),
            ` · up to ${upToText(share.upTo)} · expires ${formatTime(share.expiresAt)}`,
            share.redact?.length ? ` · hides ${share.redact.join(", ")}` : " · hides nothing",
            h("span", { class: "muted" }, ` · made ${formatTime(share.createdAt)}`),
          ),
          h("button", { type: "button", class: "danger revoke", "aria-label": `Revoke ${share.id}`, onclick: () => this.revoke(share.id) }, "Revoke"),
        ),
      ),
    );
  }

  async revoke(shareId) {
    try {
      await request("DELETE", sessionPath(this.sessionId, `/shares/${encodeURIComponent(shareId)}`));
      replaceChildren(this.problemArea);
    } catch (problem) {
      replaceChildren(this.problemArea, problemBox(asProblem(problem)));
    }
    await this.refresh();
  }
}
