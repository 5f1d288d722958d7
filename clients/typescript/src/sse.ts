// Server-sent events from a stream of bytes (the text/event-stream rules): lines, then frames. A frame is
// delivered only once its blank line has come, so a stream cut in the middle of one never yields half of it.

/** One frame: `event` is undefined for an event frame (`id` its seq, `data` its JSON). */
export interface Frame {
  event: string | undefined;
  id: string | undefined;
  data: string[];
}

/** Splits decoded text into lines at CR LF, LF or CR (a CR at the end of a piece waits for the next one). */
export class LineSplitter {
  private pending = "";

  push(text: string): string[] {
    this.pending += text;
    const lines: string[] = [];
    for (;;) {
      const found = this.pending.search(/\r\n|\n|\r/);
      if (found < 0) break;
      if (this.pending[found] === "\r" && found === this.pending.length - 1) break; // maybe CR LF, split
      const width = this.pending.startsWith("\r\n", found) ? 2 : 1;
      lines.push(this.pending.slice(0, found));
      this.pending = this.pending.slice(found + width);
    }
    return lines;
  }
}

export class FrameParser {
  private frame: Frame = { event: undefined, id: undefined, data: [] };
  private started = false;
  comments = 0;

  /** Feeds one line; the frame it completes, if any. */
  feed(line: string): Frame | undefined {
    if (line === "") {
      const { frame, started } = this;
      this.frame = { event: undefined, id: undefined, data: [] };
      this.started = false;
      return started ? frame : undefined;
    }
    if (line.startsWith(":")) {
      this.comments += 1;
      return undefined;
    }
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    this.started = true;
    if (name === "data") this.frame.data.push(value);
    else if (name === "id") this.frame.id = value;
    else if (name === "event") this.frame.event = value;
    return undefined;
  }
}
