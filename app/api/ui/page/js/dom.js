// Building the page: elements made from data, text always set as text (a session's content is never HTML).

/**
 * h("a", {href: "#/", class: "brand"}, "forklog", child, [more]): an element; attributes named on* are listeners,
 * `class` and `text` are shortcuts, null and false children are skipped, arrays are flattened.
 */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "class") {
      element.className = value;
    } else if (name === "text") {
      element.textContent = value;
    } else if (name === "dataset") {
      Object.assign(element.dataset, value);
    } else if (value === true) {
      element.setAttribute(name, "");
    } else {
      element.setAttribute(name, String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else element.append(child instanceof Node ? child : String(child));
  }
}

/** Empties `element` and puts `children` in it. */
export function replaceChildren(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

const pad = (number, width = 2) => String(number).padStart(width, "0");

/** Epoch milliseconds as local "YYYY-MM-DD HH:MM:SS" (the same in every browser locale). */
export function formatTime(ms) {
  if (typeof ms !== "number") return "";
  const date = new Date(ms);
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`
  );
}

/** 12345 -> "12,345". */
export const formatCount = (number) => Number(number).toLocaleString("en-US");

/** The URL fragment of a session's page (ids are [A-Za-z0-9._-], but the fragment encodes anyway). */
export const sessionHref = (id, tab = "") => `#/s/${encodeURIComponent(id)}${tab ? `/${tab}` : ""}`;

/** A link to a session. */
export const sessionLink = (id, attributes = {}) => h("a", { href: sessionHref(id), class: "session-id", ...attributes }, id);

/** Text cut to `length` code points, with an ellipsis when cut. */
export function shorten(text, length = 120) {
  const points = Array.from(String(text));
  return points.length <= length ? points.join("") : `${points.slice(0, length).join("")}…`;
}
