// The core vocabulary (spec 1.2) at run time. TypeScript narrows a union by a literal `type` only when no member's
// `type` is a plain string, and an event of another type (OtherEvent) has one: so `isCoreEvent` sets those apart,
// and then `event.type === "turn/start"` narrows to that type's event, its `data` typed.
import type { CoreEvent } from "./types.js";

/** A type of the core vocabulary: `"turn/start"`, `"tool/call"`, … */
export type CoreEventType = CoreEvent["type"];

// Keyed by every core type and nothing else: a type the document adds or drops fails the build until it is here.
const CORE_EVENT_TYPES: { readonly [type in CoreEventType]: true } = {
  "turn/start": true,
  "turn/end": true,
  "step/start": true,
  "step/end": true,
  "user/message": true,
  "assistant/chunk": true,
  "assistant/message": true,
  "tool/call": true,
  "tool/result": true,
  "request/header": true,
  "todo/write": true,
  "request/context": true,
  "session/end-seed": true,
};

/** Whether an event (stored, to append, or of a seed) has a type of the core vocabulary. */
export function isCoreEvent<E extends { type: string }>(event: E): event is Extract<E, { type: CoreEventType }> {
  return Object.hasOwn(CORE_EVENT_TYPES, event.type);
}
