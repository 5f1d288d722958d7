// The live tail (spec 15, "The tail"): GET …/events/stream, resumed after any disconnect with Last-Event-ID.
// The session's instance is pinned at the first connect, so a session deleted and made again under the same id
// is not followed; failed connects in a row count against maxRetries, and a frame (an event, or the server's
// ping comment) resets the count, so a tail that keeps reaching the server never gives up.
import { ConnectionError, ForklogError, errorFor } from "./errors.js";
import type { Forklog, Sessions } from "./client.js";
import { problemOf, sessionPath } from "./client.js";
import { answerWait, backoff, sleep } from "./retry.js";
import { FrameParser, LineSplitter } from "./sse.js";
import type { Event, TailOptions } from "./types.js";

function ended(status: number, code: unknown): boolean {
  return status === 404 || (status === 409 && code === "SESSION_NOT_LIVE");
}

/** A session's tail: its instance pinned at the first connect. */
export async function* follow(
  client: Forklog,
  sessions: Sessions,
  id: string,
  options: TailOptions,
): AsyncGenerator<Event, void, undefined> {
  const { instance } = await sessions.get(id); // SessionNotFoundError here: it does not exist at the first connect
  yield* stream(client, sessionPath(id, "events", "stream"), { instance }, options);
}

/** The stream at `path` (a session's, or a live share's), followed across disconnects until it is gone. */
export async function* stream(
  client: Forklog,
  path: string,
  query: Record<string, string | undefined>,
  options: TailOptions,
): AsyncGenerator<Event, void, undefined> {
  const { signal } = options;
  let nextSeq = options.fromSeq ?? 0;
  let deliveredAny = false;
  let failures = 0; // failed connects since the last frame
  let quietAttempts = 0; // connects of any outcome since the last frame: the backoff's exponent
  const heard = (): void => {
    failures = 0;
    quietAttempts = 0;
  };

  while (!signal?.aborted) {
    let wait: number | undefined;
    let connected = false;
    const controller = new AbortController();
    const stop = (): void => controller.abort();
    signal?.addEventListener("abort", stop);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(stop, client.timeoutMs);
    };
    try {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (deliveredAny) headers["Last-Event-ID"] = String(nextSeq - 1);
      arm();
      const response = await client.fetch(client.url(path, { ...query, from: nextSeq }), {
        headers: client.headers(headers),
        signal: controller.signal,
      });
      if (response.status === 200 && response.body !== null) {
        connected = true;
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        const lines = new LineSplitter();
        const frames = new FrameParser();
        try {
          for (;;) {
            arm();
            const { done, value } = await reader.read();
            clearTimeout(timer); // the consumer may take its time with what this read brought
            if (done) break;
            for (const line of lines.push(decoder.decode(value, { stream: true }))) {
              const comments = frames.comments;
              const frame = frames.feed(line);
              if (frame === undefined) {
                if (frames.comments !== comments) heard();
                continue;
              }
              heard();
              if (frame.event === "deleted") return;
              if (frame.event !== undefined || frame.data.length === 0) continue;
              const event = JSON.parse(frame.data.join("\n")) as Event;
              if (typeof event.seq !== "number" || event.seq < nextSeq) continue; // a repeat: delivered already
              nextSeq = event.seq + 1;
              deliveredAny = true;
              yield event;
            }
          }
        } finally {
          reader.cancel().catch(() => undefined);
        }
      } else {
        const text = await response.text();
        const problem = problemOf(response.status, text);
        if (ended(response.status, problem.code)) return;
        wait = answerWait(response.status, response.headers, problem, quietAttempts);
        failures += 1;
        if (wait === undefined || failures > client.maxRetries) throw errorFor(response.status, problem);
      }
    } catch (lost) {
      if (signal?.aborted) return;
      if (lost instanceof ForklogError) throw lost;
      if (!connected) {
        failures += 1;
        if (failures > client.maxRetries) {
          throw new ConnectionError(`GET ${path}: ${String(lost)}, after ${client.maxRetries} retries`, {
            cause: lost,
          });
        }
      }
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", stop);
    }
    await sleep(wait ?? backoff(quietAttempts));
    quietAttempts += 1;
  }
}
