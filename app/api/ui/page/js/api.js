// Talking to forklog: JSON requests with the tab's key, every failure as a Problem (RFC 9457: title and detail).
//
// With a keys file every API route answers 401 UNAUTHENTICATED without a key: that answer is how the page learns
// that keys are on. It then asks for a key once (one prompt however many requests were refused), keeps it in
// sessionStorage (this tab only: never a cookie, never the URL), and retries. Only the live stream carries it in
// its URL (?access_token=), because an EventSource cannot send an Authorization header.

const KEY_ITEM = "forklog.key";

/** A refusal or a failure, shaped as the problem document forklog answers. */
export class Problem extends Error {
  constructor(body, status) {
    const title = typeof body?.title === "string" ? body.title : `HTTP ${status}`;
    super(title);
    this.title = title;
    this.detail = typeof body?.detail === "string" ? body.detail : "";
    this.status = typeof body?.status === "number" ? body.status : status;
    this.code = typeof body?.code === "string" ? body.code : null;
    this.errors = Array.isArray(body?.errors) ? body.errors : [];
    this.body = body;
  }
}

export const currentKey = () => sessionStorage.getItem(KEY_ITEM);

export function setKey(key) {
  sessionStorage.setItem(KEY_ITEM, key);
  keyListeners.forEach((listener) => listener(key));
}

export function forgetKey() {
  sessionStorage.removeItem(KEY_ITEM);
  keyListeners.forEach((listener) => listener(null));
}

const keyListeners = new Set();
/** `listener(key or null)` after the key changes; returns the function that stops it. */
export function onKeyChange(listener) {
  keyListeners.add(listener);
  return () => keyListeners.delete(listener);
}

let askForKey = null;
let pendingAsk = null;
/** `ask(problem) -> Promise<boolean>`: prompts for a key (true when one was entered). */
export function setKeyPrompt(ask) {
  askForKey = ask;
}

function promptOnce(problem) {
  if (!askForKey) return Promise.resolve(false);
  pendingAsk ??= askForKey(problem).finally(() => {
    pendingAsk = null;
  });
  return pendingAsk;
}

/** A path with its query (values that are null or undefined are left out). */
export function withQuery(path, query = {}) {
  const parameters = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== null && value !== undefined && value !== "") parameters.set(name, String(value));
  }
  const text = parameters.toString();
  return text ? `${path}?${text}` : path;
}

/** The problem an error answer carries, or one that says what came instead. */
async function problemOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!body || typeof body !== "object") {
    body = { title: `HTTP ${response.status} ${response.statusText}`.trim(), detail: "the answer was not a problem document" };
  }
  return new Problem(body, response.status);
}

/**
 * `request("POST", "/sessions/a/fork", {body: {atSeq: 5}})` -> the parsed JSON answer (null for 204).
 * Throws a Problem; a 401 first asks for a key and retries with it.
 */
export async function request(method, path, { body, query } = {}) {
  const url = withQuery(path, query);
  for (;;) {
    const headers = { Accept: "application/json" };
    const key = currentKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch (error) {
      throw new Problem(
        { title: "No answer from forklog", detail: `${method} ${url} failed (${error.message}): is the service running?` },
        0,
      );
    }
    if (response.ok) return response.status === 204 ? null : response.json();
    const problem = await problemOf(response);
    if (problem.code === "UNAUTHENTICATED" && (await promptOnce(problem))) continue;
    throw problem;
  }
}

/** The live tail's URL: from a seq on; the key, when there is one, as ?access_token= (the only place it goes). */
export function streamUrl(id, from) {
  return withQuery(`/sessions/${encodeURIComponent(id)}/events/stream`, { from, access_token: currentKey() });
}

export const sessionPath = (id, rest = "") => `/sessions/${encodeURIComponent(id)}${rest}`;
