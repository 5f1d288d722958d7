// The live tail (spec 7) through an EventSource: each frame is one event (id: its seq). A dropped connection is
// reopened by the browser itself, which sends Last-Event-ID, so the stream resumes right after the last event seen,
// with no gap and no duplicate; the page still ignores any seq it already has.

import { streamUrl } from "./api.js";

/** What the page shows of the tail. */
export const LiveState = Object.freeze({
  CONNECTING: "connecting", // opening the stream
  LIVE: "live", // open: new events arrive as they are stored
  RECONNECTING: "reconnecting", // the connection dropped; the browser retries and resumes by Last-Event-ID
  STOPPED: "stopped", // the stream was refused or closed for good (the page says why, and can reopen it)
  DELETED: "deleted", // the session was deleted: the stream ended with event: deleted
});

export class LiveTail {
  /** Follows session `id` from seq `from` on; `onEvent(event)` for each new event, `onState(state)` on changes. */
  constructor(id, from, { onEvent, onState }) {
    this.id = id;
    this.nextSeq = from;
    this.onEvent = onEvent;
    this.onState = onState;
    this.source = null;
    this.state = null;
  }

  start() {
    this.stop();
    this.setState(LiveState.CONNECTING);
    const source = new EventSource(streamUrl(this.id, this.nextSeq));
    this.source = source;
    source.addEventListener("open", () => this.setState(LiveState.LIVE));
    source.addEventListener("message", (message) => {
      const event = JSON.parse(message.data);
      if (event.seq < this.nextSeq) return; // already shown
      this.nextSeq = event.seq + 1;
      this.onEvent(event);
    });
    source.addEventListener("deleted", () => {
      this.stop();
      this.setState(LiveState.DELETED);
    });
    source.addEventListener("error", () => {
      if (this.source !== source) return;
      // CONNECTING: the browser reconnects by itself. CLOSED: it gave up (an answer that was not a stream).
      this.setState(source.readyState === EventSource.CLOSED ? LiveState.STOPPED : LiveState.RECONNECTING);
    });
  }

  stop() {
    if (this.source) {
      this.source.close();
      this.source = null;
    }
  }

  setState(state) {
    if (state === this.state) return;
    this.state = state;
    this.onState(state);
  }
}
