// The client: `new Forklog({baseUrl})` and its `sessions`. Every call goes through `send`, which retries as
// retry.ts says and sends each retry with the very body and Idempotency-Key of the first attempt; the tail keeps
// its own loop (tail.ts).
import { ConnectionError, type ForklogError, type Problem, errorFor } from "./errors.js";
import { answerWait, backoff, sleep } from "./retry.js";
import { follow } from "./tail.js";
import type {
  AppendOptions,
  Appended,
  CreateOptions,
  Event,
  EventsOptions,
  ForkOptions,
  ForklogOptions,
  History,
  HistoryOptions,
  InterruptOptions,
  Lineage,
  ListOptions,
  LogOptions,
  NewEvent,
  Session,
  Snapshot,
  SnapshotOptions,
  TailOptions,
  UpdateOptions,
} from "./types.js";

type Query = Record<string, string | number | undefined>;

/**
 * One request; `goneIsDone` marks a delete, whose retry answered 404 means an earlier attempt did it; `accept` asks
 * for a file of that media type, answered as its bytes (not JSON).
 */
export interface Call {
  method: string;
  path: string;
  query?: Query;
  body?: string;
  idempotencyKey?: string;
  goneIsDone?: boolean;
  accept?: string;
}

const LOG_MEDIA_TYPES = { none: "application/x-ndjson", zstd: "application/zstd" } as const;

/** The members that are given (`undefined` means "not given"), as a JSON body. */
function bodyOf(members: Record<string, unknown>): string {
  return JSON.stringify(Object.fromEntries(Object.entries(members).filter(([, value]) => value !== undefined)));
}

/** A random key (crypto.getRandomValues works where randomUUID does not: pages served over plain http). */
export function newKey(): string {
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  return "forklog-ts-" + Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

export function sessionPath(id: string, ...rest: string[]): string {
  return ["/sessions", encodeURIComponent(id), ...rest].join("/");
}

export function problemOf(status: number, text: string): Problem {
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) return parsed as Problem;
  } catch {
    // not JSON: a proxy's page
  }
  return { status, detail: text.slice(0, 500) };
}

/** A forklog service: `client.sessions.create(...)` and the rest. */
export class Forklog {
  readonly baseUrl: string;
  readonly maxRetries: number;
  readonly timeoutMs: number;
  readonly sessions: Sessions;
  /** @internal */
  readonly fetch: typeof fetch;
  private readonly apiKey: string | undefined;

  constructor(options: ForklogOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.maxRetries = options.maxRetries ?? 2;
    this.fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.sessions = new Sessions(this);
  }

  /** @internal */
  url(path: string, query: Query = {}): string {
    const given = Object.entries(query).filter((entry): entry is [string, string | number] => entry[1] !== undefined);
    const search = new URLSearchParams(given.map(([name, value]) => [name, String(value)])).toString();
    return this.baseUrl + path + (search ? `?${search}` : "");
  }

  /** @internal */
  headers(extra: Record<string, string> = {}): Record<string, string> {
    const headers: Record<string, string> = { Accept: "application/json", ...extra };
    if (this.apiKey !== undefined) headers.Authorization = `Bearer ${this.apiKey}`;
    return headers;
  }

  /** @internal */
  async send<T>(call: Call): Promise<T> {
    const extra: Record<string, string> = {};
    if (call.body !== undefined) extra["Content-Type"] = "application/json";
    if (call.idempotencyKey !== undefined) extra["Idempotency-Key"] = call.idempotencyKey;
    if (call.accept !== undefined) extra.Accept = call.accept;
    const init = { method: call.method, headers: this.headers(extra), body: call.body };
    const url = this.url(call.path, call.query);
    for (let retry = 0; ; retry += 1) {
      let status: number;
      let headers: Headers;
      let text: string;
      let bytes: Uint8Array | undefined;
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), this.timeoutMs);
      try {
        const response = await this.fetch(url, { ...init, signal: controller.signal });
        ({ status, headers } = response);
        // inside the try: a body cut short is a lost answer too
        if (call.accept !== undefined) {
          bytes = new Uint8Array(await response.arrayBuffer());
          text = new TextDecoder().decode(bytes);
        } else {
          text = await response.text();
        }
      } catch (lost) {
        if (retry >= this.maxRetries) {
          throw new ConnectionError(`${call.method} ${call.path}: ${String(lost)}, after ${retry} retries`, {
            cause: lost,
          });
        }
        await sleep(backoff(retry));
        continue;
      } finally {
        clearTimeout(timer);
      }
      if (status >= 200 && status < 300) {
        if (bytes !== undefined) return bytes as T;
        return (text ? JSON.parse(text) : undefined) as T;
      }
      const problem = problemOf(status, text);
      if (call.goneIsDone && retry > 0 && status === 404 && problem.code === "SESSION_NOT_FOUND") {
        return undefined as T;
      }
      const wait = retry < this.maxRetries ? answerWait(status, headers, problem, retry) : undefined;
      if (wait === undefined) throw errorFor(status, problem) satisfies ForklogError;
      await sleep(wait);
    }
  }
}

/** The session operations (spec 15): required arguments positional, the optional ones in one options object. */
export class Sessions {
  constructor(private readonly client: Forklog) {}

  create(options: CreateOptions = {}): Promise<Session> {
    const { id, seed, meta, idempotencyKey } = options;
    return this.client.send({
      method: "POST",
      path: "/sessions",
      body: bodyOf({ id, seed, meta }),
      idempotencyKey: idempotencyKey ?? newKey(),
    });
  }

  get(id: string): Promise<Session> {
    return this.client.send({ method: "GET", path: sessionPath(id) });
  }

  async delete(id: string): Promise<void> {
    await this.client.send<undefined>({ method: "DELETE", path: sessionPath(id), goneIsDone: true });
  }

  /**
   * Archive (`{archived: true}`) or unarchive the session: hidden from `list` and searches unless they ask for
   * `archived: true` or `"any"`; its log is unchanged. A retry sets the same value again, so it is harmless.
   */
  update(id: string, options: UpdateOptions): Promise<Session> {
    const { archived, expectedSeq, instance } = options;
    return this.client.send({ method: "PATCH", path: sessionPath(id), body: bodyOf({ archived, expectedSeq, instance }) });
  }

  /**
   * Close the open turn as DSH closes an abandoned one (error results for unanswered tool calls, the open step's
   * end, `turn/end` with reason `interrupted`), appended as one batch and answered as an append. Throws
   * NotInTurnError when no turn is open.
   */
  interrupt(id: string, options: InterruptOptions = {}): Promise<Appended> {
    const { expectedSeq, instance, idempotencyKey } = options;
    return this.client.send({
      method: "POST",
      path: sessionPath(id, "interrupt"),
      body: bodyOf({ expectedSeq, instance }),
      idempotencyKey: idempotencyKey ?? newKey(),
    });
  }

  /** Every matching session, page after page (each page one request, asked for as the iteration needs it). */
  async *list(options: ListOptions = {}): AsyncGenerator<Session, void, undefined> {
    const { pageSize = 100, archived, ...filters } = options;
    const shown = archived === undefined ? undefined : String(archived);
    let cursor: string | undefined;
    for (;;) {
      const page = await this.client.send<{ items: Session[]; nextCursor: string | null }>({
        method: "GET",
        path: "/sessions",
        query: { ...filters, archived: shown, limit: pageSize, cursor },
      });
      yield* page.items;
      if (page.nextCursor === null || page.nextCursor === undefined) return;
      cursor = page.nextCursor;
    }
  }

  append(id: string, events: ReadonlyArray<NewEvent>, options: AppendOptions = {}): Promise<Appended> {
    const { expectedSeq, instance, idempotencyKey } = options;
    return this.client.send({
      method: "POST",
      path: sessionPath(id, "events"),
      body: bodyOf({ events, expectedSeq, instance }),
      idempotencyKey: idempotencyKey ?? newKey(),
    });
  }

  /** The stored events from `fromSeq` to the end of the log as it is when each page is read. */
  async *events(id: string, options: EventsOptions = {}): AsyncGenerator<Event, void, undefined> {
    const { pageSize = 1000 } = options;
    let position = options.fromSeq ?? 0;
    for (;;) {
      const page = await this.client.send<{ events: Event[]; nextSeq: number; eventCount: number }>({
        method: "GET",
        path: sessionPath(id, "events"),
        query: { from: position, limit: pageSize },
      });
      yield* page.events;
      if (page.events.length === 0 || page.nextSeq >= page.eventCount) return;
      position = page.nextSeq;
    }
  }

  /**
   * Every event from `fromSeq` on, live, each once and in order, across disconnects, until the session is deleted.
   * Throws SessionNotFoundError when the session does not exist at the first connect.
   */
  tail(id: string, options: TailOptions = {}): AsyncGenerator<Event, void, undefined> {
    return follow(this.client, this, id, options);
  }

  history(id: string, options: HistoryOptions = {}): Promise<History> {
    return this.client.send({ method: "GET", path: sessionPath(id, "history"), query: { atSeq: options.atSeq } });
  }

  /** The session's DSH log as a file, as `forklog export` writes it: raw JSONL, or `.jsonl.zstd` (`compression`). */
  log(id: string, options: LogOptions = {}): Promise<Uint8Array> {
    const accept = LOG_MEDIA_TYPES[options.compression ?? "none"];
    return this.client.send({ method: "GET", path: sessionPath(id, "log"), accept });
  }

  snapshot(id: string, options: SnapshotOptions = {}): Promise<Snapshot> {
    const { instance, atSeq, expectedSeq } = options;
    return this.client.send({
      method: "POST",
      path: sessionPath(id, "snapshot"),
      body: bodyOf({ instance, atSeq, expectedSeq }),
    });
  }

  fork(id: string, options: ForkOptions = {}): Promise<Session> {
    const { sessionId, instance, atSeq, atTurn, atMessageId, expectedSeq, events, idempotencyKey } = options;
    return this.client.send({
      method: "POST",
      path: sessionPath(id, "fork"),
      body: bodyOf({ sessionId, instance, atSeq, atTurn, atMessageId, expectedSeq, events }),
      idempotencyKey: idempotencyKey ?? newKey(),
    });
  }

  lineage(id: string): Promise<Lineage> {
    return this.client.send({ method: "GET", path: sessionPath(id, "lineage") });
  }
}

