// The session browser's entry: the router over the URL fragment (#/ the list, #/s/ID a session, #/s/ID/events its
// raw log), the tab's key, and the page-wide notices.

import { currentKey, forgetKey, onKeyChange, setKeyPrompt } from "./api.js";
import { askForKey } from "./dialogs.js";
import { h, replaceChildren } from "./dom.js";
import { ListView } from "./list.js";
import { SessionView } from "./session.js";

const main = document.getElementById("main");
const notices = document.getElementById("notice");
const keyState = document.getElementById("key-state");

let view = null; // the view on screen: a ListView or a SessionView

function notify(text) {
  replaceChildren(notices, h("p", {}, text, " ", h("button", { type: "button", class: "link", onclick: () => replaceChildren(notices) }, "Dismiss")));
}

function navigate(hash) {
  location.hash = hash.startsWith("#") ? hash.slice(1) : hash;
}

/** "#/s/ID/events?from=3" -> {page: "session", id, tab: "events", params}. */
function parse(hash) {
  const [path, query = ""] = hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query);
  const match = /^\/s\/([^/]+)(?:\/(events))?\/?$/.exec(path);
  if (match) return { page: "session", id: decodeURIComponent(match[1]), tab: match[2] ?? "", params };
  return { page: "list", params };
}

async function route() {
  const target = parse(location.hash || "#/");
  if (target.page === "session") {
    if (!(view instanceof SessionView) || view.id !== target.id) {
      view?.dispose?.();
      view = new SessionView(main, target.id, { navigate, notify });
    }
    document.title = `${target.id} · forklog`;
    await view.open(target.tab, target.params);
    return;
  }
  view?.dispose?.();
  view = new ListView(main);
  document.title = "Sessions · forklog";
  await view.open(target.params);
}

function showKeyState() {
  keyState.hidden = currentKey() === null;
}

document.getElementById("forget-key").addEventListener("click", () => {
  forgetKey();
  notify("The key is forgotten: the next request asks for one again.");
});
onKeyChange(showKeyState);
setKeyPrompt(askForKey);
showKeyState();
window.addEventListener("hashchange", route);
route();
