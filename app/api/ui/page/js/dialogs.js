// The modal dialogs (native <dialog>: focus stays inside, Escape cancels): the access key, a fork, an edit (fork
// with the edited message), a delete.
// A dialog whose action fails stays open and shows the problem, so the person can correct the input.

import { replaceChildren } from "./dom.js";
import { setKey } from "./api.js";
import { asProblem, problemBox } from "./problem.js";

const byId = (id) => document.getElementById(id);

/**
 * Shows `dialog`; `submit()` runs on its form's submit and may throw a Problem (shown, the dialog stays open).
 * Resolves with submit's result, or with `undefined` when the dialog is cancelled.
 */
function run(dialog, submit, focus) {
  const form = dialog.querySelector("form");
  const problemArea = dialog.querySelector(".dialog-problem");
  const buttons = [...form.querySelectorAll("button")];
  return new Promise((resolve) => {
    let settled = false;
    const finish = (value) => {
      if (settled) return;
      settled = true;
      form.removeEventListener("submit", onSubmit);
      dialog.removeEventListener("close", onClose);
      cancelButton?.removeEventListener("click", onCancel);
      if (dialog.open) dialog.close();
      resolve(value);
    };
    const onSubmit = async (event) => {
      event.preventDefault();
      buttons.forEach((button) => (button.disabled = true));
      try {
        const value = await submit();
        finish(value);
      } catch (error) {
        replaceChildren(problemArea, problemBox(asProblem(error)));
      } finally {
        buttons.forEach((button) => (button.disabled = false));
      }
    };
    const onClose = () => finish(undefined);
    const onCancel = () => finish(undefined);
    const cancelButton = form.querySelector("[data-cancel]");
    form.addEventListener("submit", onSubmit);
    dialog.addEventListener("close", onClose);
    cancelButton?.addEventListener("click", onCancel);
    dialog.showModal();
    focus?.focus();
  });
}

/** The service wants a key: ask for it (the refusal's title and detail say why); true when one was entered. */
export async function askForKey(problem) {
  const dialog = byId("key-dialog");
  const input = byId("key-input");
  input.value = "";
  replaceChildren(dialog.querySelector(".dialog-problem"), problemBox(problem));
  const entered = await run(
    dialog,
    async () => {
      const key = input.value.trim();
      if (!key) throw { title: "No key entered", detail: "paste the key that `python -m app keys new` printed", errors: [] };
      setKey(key);
      return true;
    },
    input,
  );
  return entered === true;
}

/** Fork `sessionId` at `atSeq` (null: the whole log); `fork(childId or null)` does it and returns the child. */
export function forkDialog({ sessionId, atSeq, where, fork }) {
  const dialog = byId("fork-dialog");
  const input = byId("fork-child-id");
  input.value = "";
  byId("fork-source").textContent = sessionId;
  byId("fork-where").textContent = where;
  replaceChildren(dialog.querySelector(".dialog-problem"));
  return run(dialog, () => fork(input.value.trim() || null, atSeq), input);
}

/** Edit a user message and fork before its turn: `fork(text)` does it and returns the child. */
export function editDialog({ sessionId, where, text, fork }) {
  const dialog = byId("edit-dialog");
  const input = byId("edit-text");
  input.value = text;
  byId("edit-source").textContent = sessionId;
  byId("edit-where").textContent = where;
  replaceChildren(dialog.querySelector(".dialog-problem"));
  return run(
    dialog,
    () => {
      if (!input.value.trim()) throw { title: "The message is empty", detail: "write the message to send instead", errors: [] };
      return fork(input.value);
    },
    input,
  );
}

/** Ask before deleting `sessionId`; `remove()` deletes it. Resolves true once it is gone. */
export function confirmDelete({ sessionId, childCount, remove }) {
  const dialog = byId("delete-dialog");
  byId("delete-target").textContent = sessionId;
  byId("delete-children").textContent = childCount
    ? childCount === 1
      ? " Its child keeps its own log."
      : ` Its ${childCount} children keep their own logs.`
    : "";
  replaceChildren(dialog.querySelector(".dialog-problem"));
  return run(
    dialog,
    async () => {
      await remove();
      return true;
    },
    dialog.querySelector("[data-cancel]"),
  ).then((done) => done === true);
}
