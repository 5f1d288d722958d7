// How every error looks on the page: the problem's title and detail (and, for a malformed request, each field).

import { h } from "./dom.js";

export function problemBox(problem) {
  const facts = [problem.status ? String(problem.status) : null, problem.code].filter(Boolean).join(" · ");
  return h(
    "div",
    { class: "problem", role: "alert" },
    h("strong", { class: "problem-title" }, problem.title),
    problem.detail ? h("p", { class: "problem-detail" }, problem.detail) : null,
    problem.errors.length
      ? h(
          "ul",
          { class: "problem-errors" },
          problem.errors.map((error) => h("li", {}, h("code", {}, error.field || "(body)"), `: ${error.reason}`)),
        )
      : null,
    facts ? h("p", { class: "problem-code" }, facts) : null,
  );
}

/** Any thrown value as something problemBox can show. */
export function asProblem(error) {
  if (error && typeof error.title === "string" && Array.isArray(error.errors)) return error;
  return { title: "Something went wrong in the page", detail: String(error?.message ?? error), status: 0, code: null, errors: [] };
}
