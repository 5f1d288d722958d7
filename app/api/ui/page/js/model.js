// A session's conversation as the page shows it: the model history (spec 1.3) in model order, with its turn
// boundaries placed among the messages and each tool call paired with its result.
//
// The messages come from GET /history (the service's own fold); the log is read once, in pages, for what the
// history does not say: the seq of each surface node (the same fold over the surface events' surfaceOps) and the
// turn/start and turn/end events. Live events then extend the same fold, so a replace (a compaction) is applied
// here exactly as the service applies it.

/** The message a surface event contributes, or null (an assistant/message with empty content adds none). */
export function projectMessage(event) {
  if (event.type === "user/message") return event.data;
  if (event.type === "assistant/message") return event.data?.message?.content?.length ? event.data.message : null;
  if (event.type === "tool/result") return event.data?.message ?? null;
  return null;
}

const isSurface = (event) => event.surfaceOp !== undefined;

/** The call a tool result answers, or null for any other message. */
export function resultCallId(message) {
  const block = message?.content?.[0];
  if (!block || block.type !== "tool-result") return null;
  return block.toolCallId ?? message.source?.callId ?? null;
}

/** The ids of the tool calls an assistant message makes. */
export function callIds(message) {
  return (message?.content ?? []).filter((block) => block?.type === "tool-call" && block.id).map((block) => block.id);
}

/** What one page of the log contributes to a later Conversation: surface ops and turn boundaries. */
export class LogIndex {
  constructor() {
    this.ops = []; // [seq, start, end, contributes] per surface event; start = end = -1 for an append
    this.boundaries = []; // {kind: "turn-start" | "turn-end", seq, turn, reason, time}
  }

  add(event) {
    if (isSurface(event)) {
      const op = event.surfaceOp;
      const contributes = projectMessage(event) !== null;
      if (op === "append") this.ops.push([event.seq, -1, -1, contributes]);
      else this.ops.push([event.seq, op.start, op.end, contributes]);
    } else if (event.type === "turn/start" || event.type === "turn/end") {
      this.boundaries.push(boundaryOf(event));
    }
  }
}

function boundaryOf(event) {
  return {
    kind: event.type === "turn/start" ? "turn-start" : "turn-end",
    seq: event.seq,
    turn: event.data?.turn,
    reason: event.data?.reason ?? null,
    time: event.time,
  };
}

export class Conversation {
  /** `messages`: GET /history's; `index`: the LogIndex of the same events (seq 0 to the history's eventCount). */
  constructor(messages, index) {
    this.nodes = []; // the current surface nodes' seqs, in model order
    this.messageOf = new Map(); // node seq -> its message, or null when it contributes none
    const contributes = new Map();
    for (const [seq, start, end, adds] of index.ops) {
      this.fold(seq, start, end);
      contributes.set(seq, adds);
    }
    const contributing = this.nodes.filter((seq) => contributes.get(seq));
    // The contributing nodes and the history's messages pair up in order. Should they ever disagree, the messages
    // still show, in their order, with the boundaries after them, and a live replace reloads the page's copy.
    this.aligned = contributing.length === messages.length;
    if (this.aligned) {
      for (const seq of this.nodes) this.messageOf.set(seq, null);
      contributing.forEach((seq, at) => this.messageOf.set(seq, messages[at]));
    } else {
      this.nodes = messages.map((_, at) => -1 - at);
      messages.forEach((message, at) => this.messageOf.set(-1 - at, message));
    }
    this.boundaries = index.boundaries;
    this.build();
  }

  /** Folds one surface op (spec 1.3); false when the op names nodes this copy does not have. */
  fold(seq, start, end) {
    if (start < 0) {
      this.nodes.push(seq);
      return true;
    }
    const from = this.nodes.indexOf(start);
    const to = this.nodes.indexOf(end);
    if (from < 0 || to < from) return false;
    const removed = this.nodes.splice(from, to - from + 1, seq);
    for (const gone of removed) this.messageOf.delete(gone);
    return true;
  }

  /** The items in display order: {kind: "message", seq, message} and the boundaries; results paired with calls. */
  build() {
    this.items = [];
    this.results = new Map(); // call id -> the result message
    this.shownCalls = new Set(); // calls whose result shows inside the call's card
    let next = 0;
    for (const seq of this.nodes) {
      const message = this.messageOf.get(seq);
      if (message === null || message === undefined) continue;
      while (next < this.boundaries.length && this.boundaries[next].seq < seq) this.items.push(this.boundaries[next++]);
      this.place(seq, message);
    }
    while (next < this.boundaries.length) this.items.push(this.boundaries[next++]);
  }

  /** Adds a message; a result whose call is already shown joins it and adds no item (the call id is returned). */
  place(seq, message) {
    const answered = resultCallId(message);
    if (answered !== null) {
      this.results.set(answered, message);
      if (this.shownCalls.has(answered)) return { paired: answered };
    }
    for (const id of callIds(message)) this.shownCalls.add(id);
    const item = { kind: "message", seq, message };
    this.items.push(item);
    return { item };
  }

  /**
   * Applies a live event: {appended: [items]} for what goes at the end, {paired: callId} for a result that joins
   * its call, {rebuilt: true} after a replace (the whole list changed), {reload: true} when this copy cannot
   * follow (read the history again), or {} for an event with nothing to show.
   */
  apply(event) {
    if (isSurface(event)) {
      const message = projectMessage(event);
      const op = event.surfaceOp;
      if (op === "append") {
        this.nodes.push(event.seq);
        this.messageOf.set(event.seq, message);
        if (message === null) return {};
        const placed = this.place(event.seq, message);
        return placed.item ? { appended: [placed.item] } : { paired: placed.paired };
      }
      if (!this.aligned || !this.fold(event.seq, op.start, op.end)) return { reload: true };
      this.messageOf.set(event.seq, message);
      this.build();
      return { rebuilt: true };
    }
    if (event.type === "turn/start" || event.type === "turn/end") {
      const boundary = boundaryOf(event);
      this.boundaries.push(boundary);
      this.items.push(boundary);
      return { appended: [boundary] };
    }
    return {};
  }
}
