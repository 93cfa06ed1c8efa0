// A conversation's messages as DOM: a user turn is its images (thumbnails) and its text; an answer is its reasoning (collapsed),
// its markdown, its tool calls and a line of stats. An answer's element is built once and updated
// in place while it streams, so an opened reasoning block stays open.

import { renderMarkdown, codeBlock } from "./markdown.js";
import { splitThink } from "./stream.js";

const h = (tag, cls, text) => {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== undefined) el.textContent = text;
  return el;
};

export function userElement(message) {
  const el = h("div", "msg user");
  if (message.images?.length) el.append(thumbnails(message.images));
  if (message.content || !message.images?.length) el.append(h("div", "bubble", message.content));
  return el;
}

/** A row of small images; `extra(image, i)` may add to each (the composer's remove button). An image
 * whose data the browser's storage could not keep (store.js) is a placeholder saying so. */
export function thumbnails(images, extra) {
  const row = h("div", "thumbs");
  images.forEach((image, i) => {
    const item = h("figure", "thumb");
    if (image.url) {
      const img = h("img");
      img.src = image.url;  // a data: URL (attachments.js read it): an <img> runs no script from it
      img.alt = image.name || `image ${i + 1}`;
      img.title = image.name || "";
      item.append(img);
    } else {
      item.classList.add("dropped");
      item.append(h("span", null, "image not kept: the browser's storage was full"));
      item.title = image.name || "";
    }
    if (extra) extra(item, image, i);
    row.append(item);
  });
  return row;
}

export function toolResultElement(message) {
  const el = h("div", "msg tool");
  const box = h("div", "tool-result");
  const head = h("div", "tool-head");
  head.append(h("span", "tool-badge result", "tool result"), h("code", "tool-name", message.name));
  box.append(head, h("pre", "tool-output", message.content));
  el.append(box);
  return el;
}

const opened = new WeakSet();  // answers whose reasoning the user opened: kept open when redrawn

/** `opts`: { last: the conversation's last message, pending: ids of its tool calls awaiting a result,
 * loading: its model was not loaded when asked }. */
export function answerElement(message, opts) {
  const el = h("div", "msg assistant");
  const reasoning = h("details", "reasoning");
  reasoning.open = opened.has(message);
  reasoning.ontoggle = () => (reasoning.open ? opened.add(message) : opened.delete(message));
  reasoning.append(h("summary", null, "Thinking"), h("div", "reasoning-text"));
  el.append(reasoning, h("div", "content markdown"), h("div", "tool-calls"), h("div", "error-text"), h("div", "meta"));
  updateAnswer(el, message, opts);
  return el;
}

export function updateAnswer(el, message, opts = {}) {
  const [inlineThought, content] = splitThink(message.content);
  const thought = (message.reasoning || "") + inlineThought;
  const streaming = message.state === "streaming";
  el.dataset.state = message.state;
  const reasoning = el.querySelector(".reasoning");
  reasoning.hidden = !thought;
  reasoning.querySelector("summary").textContent = streaming && !content ? "Thinking…" : "Reasoning";
  reasoning.querySelector(".reasoning-text").textContent = thought;
  const body = el.querySelector(".content");
  body.innerHTML = renderMarkdown(content);
  if (streaming && !content && !thought && !message.tool_calls.length) {
    body.innerHTML = '<span class="dots"><i></i><i></i><i></i></span>';
    if (opts.loading) body.append(h("span", "loading", "loading the model…"));
  }
  renderToolCalls(el.querySelector(".tool-calls"), message.tool_calls, opts.pending || new Set());
  el.querySelector(".error-text").textContent = message.state === "error" ? message.error : "";
  renderMeta(el.querySelector(".meta"), message, opts.last);
}

function renderToolCalls(box, calls, pending) {
  const typed = new Map([...box.querySelectorAll(".tool-result-form")].map((f) => [f.dataset.id, f.querySelector("textarea").value]));
  box.textContent = "";
  for (const call of calls) {
    const card = h("div", "tool-call");
    const head = h("div", "tool-head");
    head.append(h("span", "tool-badge", "tool call"), h("code", "tool-name", call.name || "…"));
    card.append(head);
    card.insertAdjacentHTML("beforeend", codeBlock(prettyJson(call.arguments), "json"));
    if (pending.has(call.id)) card.append(resultForm(call, typed.get(call.id) || ""));
    box.append(card);
  }
}

// where the user answers a call with what the tool returned (run by hand: the page runs no tools)
function resultForm(call, text) {
  const form = h("div", "tool-result-form");
  form.dataset.id = call.id;
  const area = h("textarea");
  area.rows = 2;
  area.placeholder = `What ${call.name} returned (sent back to the model)`;
  area.value = text;
  const send = h("button", "send-result", "Send result");
  send.type = "button";
  form.append(area, send);
  return form;
}

function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;  // still streaming, or not JSON: as it came
  }
}

function renderMeta(meta, message, last) {
  const s = message.stats || {};
  const parts = [];
  // the model asked for, and the one the server says answered where they differ (an alias, a router)
  if (s.model) parts.push(["model", s.answered_by && s.answered_by !== s.model ? `${s.model} → ${s.answered_by}` : s.model]);
  if (s.ttft_ms != null) parts.push(["ttft", `TTFT ${formatMs(s.ttft_ms)}`]);
  if (s.tps != null) parts.push(["tps", `${s.tps.toFixed(1)} tok/s`]);
  if (s.tokens != null) parts.push(["tokens", `${s.tokens} tokens`]);
  if (message.state === "stopped") parts.push(["stopped", "stopped"]);
  meta.textContent = "";
  for (const [cls, text] of parts) meta.append(h("span", cls, text));
  if (message.state === "streaming") return;
  const actions = h("span", "actions");
  if (last) actions.append(button("retry", "Retry", "Ask again for this answer"));
  actions.append(button("copy-answer", "Copy", "Copy the answer's markdown"));
  meta.append(actions);
}

function button(cls, text, title) {
  const b = h("button", cls, text);
  b.type = "button";
  b.title = title;
  return b;
}

function formatMs(ms) {
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(2)} s`;
}

/** Copy text, with a fallback for pages not served from a secure origin (a LAN address over http). */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch { /* denied: try the old way */ }
  }
  const area = h("textarea");
  area.value = text;
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.append(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  return ok;
}
