// One conversation item as elements: a message (its blocks: text, folded reasoning, tool calls with their results),
// or a turn boundary (turn/end with its reason.kind and a "Fork here" button).

import { formatTime, h, replaceChildren, sessionHref, shorten } from "./dom.js";
import { resultCallId } from "./model.js";

/** Arguments are a JSON string: shown indented when they parse, as they are otherwise. */
function prettyArguments(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2);
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

const json = (value) => JSON.stringify(value, null, 2);

function attachmentText(block) {
  const attachment = block.attachment ?? {};
  const size = attachment.width && attachment.height ? `${attachment.width}×${attachment.height}` : "";
  return `[${block.type}${attachment.name ? `: ${attachment.name}` : ""}${attachment.mediaType ? `, ${attachment.mediaType}` : ""}${size ? `, ${size}` : ""}]`;
}

/** The blocks of a tool result's content (text, images as a note, anything else as JSON). */
function resultContent(blocks) {
  if (!Array.isArray(blocks) || blocks.length === 0) return h("p", { class: "muted" }, "(empty result)");
  return blocks.map((block) => {
    if (block?.type === "text") return h("pre", { class: "tool-output" }, block.text);
    if (block?.type === "image") return h("p", { class: "attachment" }, attachmentText(block));
    return h("pre", { class: "tool-output" }, json(block));
  });
}

/** A result inside its call's card (or waiting for it). */
export function resultSlotContent(result) {
  if (!result) return h("p", { class: "muted waiting" }, "No result yet.");
  const block = result.content[0];
  const failed = block.isError === true;
  return [
    h("div", { class: `tool-result-head${failed ? " failed" : ""}` }, failed ? "Error result" : "Result"),
    resultContent(block.content),
  ];
}

function toolCallCard(block, conversation, slots) {
  const slot = h("div", { class: "tool-result", dataset: { callId: block.id } });
  replaceChildren(slot, resultSlotContent(conversation.results.get(block.id)));
  slots.set(block.id, slot);
  return h(
    "div",
    { class: "tool-call" },
    h("div", { class: "tool-call-head" }, "Tool call ", h("code", { class: "tool-name" }, block.name), " ", h("span", { class: "call-id" }, block.id)),
    h("pre", { class: "tool-arguments", "aria-label": `arguments of ${block.name}` }, prettyArguments(block.arguments)),
    slot,
  );
}

function blockElement(block, conversation, slots) {
  switch (block?.type) {
    case "text":
      return h("div", { class: "text" }, block.text);
    case "reasoning":
      return h(
        "details",
        { class: "reasoning" },
        h("summary", {}, `Reasoning · ${shorten(block.text ?? "", 60)}`),
        h("div", { class: "text" }, block.text),
      );
    case "tool-call":
      return toolCallCard(block, conversation, slots);
    case "tool-result":
      return h("div", { class: "tool-call standalone" }, h("div", { class: "tool-call-head" }, "Result of ", h("span", { class: "call-id" }, block.toolCallId)), resultSlotContent({ content: [block] }));
    case "image":
    case "file":
      return h("p", { class: "attachment" }, attachmentText(block));
    default:
      return h("pre", { class: "block-json" }, json(block));
  }
}

function who(message) {
  const source = message.source ?? {};
  if (resultCallId(message) !== null) return ["Tool", "tool"];
  if (message.role === "assistant") return ["Assistant", [source.provider, source.model].filter(Boolean).join(" · ")];
  return [message.role === "user" ? "User" : String(message.role), source.kind && source.kind !== "user" ? source.kind : ""];
}

/** A message item: role, source, seq (a link to the raw event), then its blocks. */
export function messageElement(item, { sessionId, conversation, slots, onEdit, editableTurn }) {
  const message = item.message;
  const [role, detail] = who(message);
  const kind = resultCallId(message) !== null ? "tool" : message.role === "assistant" ? "assistant" : "user";
  const blocks = Array.isArray(message.content) ? message.content : [];
  const turn = kind === "user" && editableTurn ? editableTurn(item) : null;
  const text = blocks.filter((block) => block?.type === "text" && typeof block.text === "string").map((block) => block.text).join(" ");
  return h(
    "li",
    { class: `item message message-${kind}`, dataset: { seq: item.seq } },
    h(
      "div",
      { class: "message-head" },
      h("span", { class: "role" }, role),
      detail ? h("span", { class: "source" }, detail) : null,
      item.seq >= 0 && sessionId ? h("a", { class: "seq", href: `${sessionHref(sessionId, "events")}?from=${item.seq}`, title: "this event in the raw log" }, `#${item.seq}`) : null,
      turn !== null && onEdit
        ? h("button", { type: "button", class: "edit-fork", onclick: () => onEdit(turn, text, message) }, "Edit and fork")
        : null,
    ),
    blocks.length ? blocks.map((block) => blockElement(block, conversation, slots)) : h("p", { class: "muted" }, "(no content)"),
  );
}

/** A turn boundary: "Turn 3" at its start; its end with the reason's kind and a "Fork here" button. */
export function boundaryElement(item, { onFork }) {
  if (item.kind === "turn-start") {
    return h(
      "li",
      { class: "item turn-start", dataset: { seq: item.seq } },
      h("h3", {}, `Turn ${item.turn}`),
      h("span", { class: "muted" }, `#${item.seq} · ${formatTime(item.time)}`),
    );
  }
  const kind = typeof item.reason?.kind === "string" ? item.reason.kind : "?";
  return h(
    "li",
    { class: "item turn-end", dataset: { seq: item.seq, reason: kind } },
    h("span", { class: "turn-end-label" }, `Turn ${item.turn} ended`),
    h("span", { class: `reason reason-${kind.replace(/[^a-z0-9-]/gi, "_")}` }, kind),
    h("span", { class: "muted" }, `#${item.seq}`),
    onFork ? h("button", { type: "button", class: "fork-here", onclick: () => onFork(item.seq, `the end of turn ${item.turn} (seq ${item.seq})`) }, "Fork here") : null,
  );
}
