// The chat page: conversations (store.js) in a sidebar (sidebar.js), the open one's messages
// (view.js), a composer that streams an answer (stream.js) and stops it and takes images for a model
// that reads them (attachments.js), a model picker over /v1/models, and the conversation's system
// prompt and sampling settings.

import { Store, autoTitle, DEFAULT_SETTINGS } from "./store.js";
import { renderSidebar } from "./sidebar.js";
import { requestBody, streamAnswer, parseTools } from "./stream.js";
import { userElement, answerElement, toolResultElement, updateAnswer, copyText } from "./view.js";
import { Attachments, listenForImages } from "./attachments.js";

const $ = (id) => document.getElementById(id);
const KEY = "hearth-key";
const LAST_MODEL = "hearth-last-model";
const SETTINGS = { system: "system", temperature: "temperature", top_p: "top-p", max_tokens: "max-tokens", tools: "tools" };

const EMPTY = $("empty");  // the welcome, shown in an empty conversation (kept: render() clears its box)
const store = new Store();
const state = { chat: null, models: [], streaming: null, views: new WeakMap(),
                vision: new Map(), visionAsked: new Set() };  // model id -> reads images (/props), and asked since the last listing
const attachments = new Attachments($("attachments"));
store.onError = notice;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("key").value.trim();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

// ---- models

let modelsAsked = 0;

async function loadModels() {
  const mine = ++modelsAsked;  // a slower earlier answer (before the key was typed) must not win
  try {
    const response = await fetch("v1/models", { headers: headers() });
    const body = await response.json();
    if (mine !== modelsAsked) return;
    if (!response.ok) throw new Error(body.error?.message || response.statusText);
    state.models = body.data || [];
    state.visionAsked.clear();  // a model may have loaded since: ask again (the last answers stand meanwhile)
    clearNotice("Could not list");
  } catch (e) {
    if (mine !== modelsAsked) return;
    state.models = [];
    notice(`Could not list the models: ${e.message}` + (/api key/i.test(e.message) ? " — enter the server's API key in the sidebar." : ""));
  }
  renderModels();
}

// hearth's extension on a /v1/models entry (servers of several models): loaded or not; undefined elsewhere
const loadedOf = (m) => m?.hearth?.loaded;

// each model once, under its own id: hearth lists aliases too (`root` names the model an alias is of),
// among them the file's path, which the picker does not show
function pickable() {
  return state.models.filter((m) => !m.root || m.root === m.id);
}

function renderModels() {
  const select = $("model");
  const listed = pickable();
  const ids = listed.map((m) => m.id);
  // a conversation kept under an alias continues on the model the alias is of
  const wanted = state.models.find((m) => m.id === state.chat?.model)?.root || state.chat?.model;
  select.textContent = "";
  if (wanted && !ids.includes(wanted)) select.append(new Option(ids.length ? `${wanted} (not served)` : wanted, wanted));
  for (const m of listed) {
    const mark = loadedOf(m) === true ? "● " : loadedOf(m) === false ? "○ " : "";
    const option = new Option(mark + m.id, m.id);
    if (loadedOf(m) === false) option.title = "not loaded: loads on first use";
    select.append(option);
  }
  select.value = wanted && select.querySelector(`option[value="${CSS.escape(wanted)}"]`) ? wanted : (ids[0] || "");
  const picked = listed.find((m) => m.id === select.value);
  $("model-state").textContent = loadedOf(picked) === false ? "loads on first use" : loadedOf(picked) ? "loaded" : "";
  askVision();
}

// ---- images: offered where the picked model reads them (llama-server's /props `modalities.vision`)

/** Ask /props whether the picked model reads images, once per model listing. Not for a model that is
 * not loaded: /props would load it (it is asked again once an answer has loaded it). */
async function askVision() {
  const model = pickedModel();
  showAttach();
  if (!model || state.visionAsked.has(model) || loadedOf(state.models.find((m) => m.id === model)) === false) return;
  state.visionAsked.add(model);
  try {
    const response = await fetch(`props?model=${encodeURIComponent(model)}`, { headers: headers() });
    const body = await response.json();
    state.vision.set(model, response.ok && body.modalities?.vision === true);
  } catch {
    state.vision.set(model, false);  // not hearth's /props (or not JSON): text only
  }
  showAttach();
}

const readsImages = () => state.vision.get(pickedModel()) === true;

function showAttach() {
  $("attach").hidden = !readsImages();
}

async function attach(files) {
  if (!files.length) return;
  const model = pickedModel() || "this model";
  if (!readsImages()) {
    return notice(state.vision.has(model) ? `Images: ${model} reads text only; it cannot be sent any.`
      : `Images: whether ${model} reads images is known once it is loaded (send it a message first).`);
  }
  const refused = await attachments.add(files);
  if (refused) notice(`Images: ${refused}`);
  else clearNotice("Images:");
}

function pickedModel() {
  return $("model").value || pickable()[0]?.id || undefined;
}

// ---- conversations

function open(id) {
  state.chat = store.get(id) || store.create(localStorage.getItem(LAST_MODEL) || pickedModel());
  store.currentId = state.chat.id;
  document.body.classList.remove("sidebar-open");
  render();
}

function newChat() {
  const empty = store.list().find((c) => !c.messages.length && c !== state.streaming?.chat);
  const settings = state.chat ? { ...state.chat.settings } : DEFAULT_SETTINGS;  // keep the user's settings
  state.chat = empty || store.create(pickedModel(), settings);
  store.currentId = state.chat.id;
  render();
  $("input").focus();
}

const sidebarActions = {
  open,
  rename: (id, title) => { store.rename(id, title); render(); },
  remove: (id) => {
    if (state.streaming?.chat.id === id) stop();
    store.remove(id);
    if (state.chat?.id === id) state.chat = null;
    open(state.chat?.id || store.list()[0]?.id);
  },
  refresh: () => renderSidebar(store, state.chat.id, state.streaming?.chat.id, sidebarActions),
};

function render() {
  sidebarActions.refresh();
  $("title").textContent = state.chat.title;
  document.title = `${state.chat.title} · hearth`;
  for (const [field, id] of Object.entries(SETTINGS)) $(id).value = state.chat.settings[field] ?? "";
  checkTools();
  renderModels();
  const box = $("messages");
  box.textContent = "";
  for (const m of state.chat.messages) box.append(messageElement(m));
  EMPTY.hidden = state.chat.messages.length > 0;
  box.append(EMPTY);
  scrollDown();
  if (store.error) notice(store.error);
}

function messageElement(m) {
  const el = m.role === "user" ? userElement(m) : m.role === "tool" ? toolResultElement(m)
    : answerElement(m, answerOptions(state.chat, m));
  state.views.set(m, el);
  return el;
}

function nearBottom() {
  const box = $("messages");
  return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
}

function scrollDown() {
  $("messages").scrollTop = $("messages").scrollHeight;
}

function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = !text;
}

/** Take the notice away if it is one about `what` (its start), now settled. */
function clearNotice(what) {
  if ($("notice").textContent.startsWith(what)) notice("");
}

// ---- sending and stopping

/** Send a user message (text and images); false (and a notice) when it cannot go. */
function send(text, images) {
  const chat = state.chat;
  if (!settingsValid(chat)) return false;
  if (images.length && state.vision.get(pickedModel()) === false) {
    notice(`Images: ${pickedModel()} reads text only; remove them, or pick a model that reads them.`);
    return false;
  }
  clearNotice("Images:");
  chat.messages.push(images.length ? { role: "user", content: text, images } : { role: "user", content: text });
  autoTitle(chat);
  generate(chat);
  return true;
}

/** Answer the last answer's tool call `id` with `text`; once every call has its result, go on. */
function sendToolResult(message, id, text) {
  const chat = state.chat;
  const call = message.tool_calls.find((c) => c.id === id);
  chat.messages.push({ role: "tool", tool_call_id: id, name: call?.name || "", content: text });
  if (pendingCalls(chat, message).size === 0 && settingsValid(chat)) generate(chat);
  else { store.save(chat); render(); }
}

/** Drop the last answer and ask again. */
function retry() {
  const chat = state.chat;
  if (chat.messages.at(-1)?.role !== "assistant" || !settingsValid(chat)) return;
  chat.messages.pop();
  generate(chat);
}

function settingsValid(chat) {
  try {
    parseTools(chat.settings.tools);
    clearNotice("Settings:");
    return true;
  } catch (e) {
    notice(`Settings: ${e.message}`);
    return false;
  }
}

async function generate(chat) {
  const body = requestBody(chat, pickedModel());
  const answer = { role: "assistant", content: "", reasoning: "", tool_calls: [], state: "streaming", error: "",
                   stats: { model: body.model } };
  const loading = loadedOf(state.models.find((m) => m.id === body.model)) === false;  // loads before it answers
  chat.messages.push(answer);
  chat.model = body.model;
  localStorage.setItem(LAST_MODEL, body.model || "");
  const controller = new AbortController();
  state.streaming = { chat, message: answer, controller };
  store.save(chat);  // a reload while it streams keeps the question (and the answer, as stopped, at its last save)
  setBusy(true);
  render();
  const update = () => {
    const el = state.views.get(answer);
    if (!el?.isConnected) return;
    const follow = nearBottom();  // measured before the answer grows
    updateAnswer(el, answer, { ...answerOptions(chat, answer), loading });
    if (follow) scrollDown();
  };
  update();
  try {
    await streamAnswer(body, headers(), answer, controller.signal, update);
    answer.state = "done";
  } catch (e) {
    answer.state = controller.signal.aborted ? "stopped" : "error";
    answer.error = e.message;
  } finally {
    state.streaming = null;
    store.save(chat);
    setBusy(false);
    update();
    sidebarActions.refresh();
    loadModels();  // a model may have been loaded (or another unloaded) for this answer
  }
}

/** The ids of `message`'s tool calls that still wait for a result (only while nothing else followed). */
function pendingCalls(chat, message) {
  const at = chat.messages.indexOf(message);
  const after = chat.messages.slice(at + 1);
  if (message.state !== "done" || after.some((m) => m.role !== "tool")) return new Set();
  const answered = new Set(after.map((m) => m.tool_call_id));
  return new Set(message.tool_calls.map((c) => c.id).filter((id) => !answered.has(id)));
}

function answerOptions(chat, message) {
  return { last: chat.messages.at(-1) === message, pending: pendingCalls(chat, message) };
}

function stop() {
  state.streaming?.controller.abort();
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
}

// ---- settings

function bindSettings() {
  for (const [field, id] of Object.entries(SETTINGS)) {
    $(id).addEventListener("input", () => {
      state.chat.settings[field] = $(id).value;
      store.save();
      if (field === "tools") checkTools();
    });
  }
  $("settings-toggle").onclick = () => {
    const panel = $("settings");
    panel.hidden = !panel.hidden;
    $("settings-toggle").setAttribute("aria-expanded", String(!panel.hidden));
  };
  $("model").onchange = () => {
    state.chat.model = $("model").value;
    localStorage.setItem(LAST_MODEL, state.chat.model);
    store.save();
    renderModels();
  };
}

function checkTools() {
  let problem = "";
  try {
    parseTools($("tools").value);
  } catch (e) {
    problem = e.message;
  }
  $("tools-error").textContent = problem;
  $("tools").classList.toggle("invalid", Boolean(problem));
}

// ---- start

function bindComposer() {
  const input = $("input");
  const grow = () => {
    input.style.height = "auto";
    input.style.height = Math.min(input.scrollHeight, 240) + "px";
    input.style.overflowY = input.scrollHeight > 240 ? "auto" : "hidden";
  };
  input.addEventListener("input", grow);
  input.onkeydown = (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer").requestSubmit(); }
  };
  $("composer").onsubmit = (e) => {
    e.preventDefault();
    const text = input.value.trim();
    if (!text && !attachments.images.length || state.streaming || !send(text, attachments.images)) return;
    attachments.take();
    input.value = "";
    grow();
  };
  $("stop").onclick = stop;
  listenForImages({ button: $("attach"), picker: $("image-files"), input, drop: $("composer") },
                  { wanted: readsImages, onFiles: attach });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape" && state.streaming) stop(); });
}

// clicks inside the messages: copy a code block or an answer, retry, send a tool call's result
function bindMessageActions() {
  const box = $("messages");
  const messageOf = (el) => state.chat.messages[[...box.children].indexOf(el.closest(".msg"))];
  box.addEventListener("click", async (e) => {
    const button = e.target.closest("button");
    if (!button || state.streaming && !button.matches(".copy, .copy-answer")) return;
    if (button.matches(".retry")) return retry();
    if (button.matches(".send-result")) {
      const form = button.closest(".tool-result-form");
      return sendToolResult(messageOf(button), form.dataset.id, form.querySelector("textarea").value);
    }
    if (!button.matches(".copy, .copy-answer")) return;
    const text = button.matches(".copy") ? button.closest(".code-block").querySelector("code").textContent
      : messageOf(button)?.content ?? "";
    const ok = await copyText(text);
    const label = button.textContent;
    button.textContent = ok ? "Copied" : "Copy failed";
    setTimeout(() => { button.textContent = label; }, 1200);
  });
}

function start() {
  $("key").value = localStorage.getItem(KEY) || "";
  $("key").onchange = () => { localStorage.setItem(KEY, $("key").value.trim()); loadModels(); };
  $("new-chat").onclick = newChat;
  $("menu").onclick = () => document.body.classList.toggle("sidebar-open");
  bindSettings();
  bindComposer();
  bindMessageActions();
  open(store.currentId || store.list()[0]?.id);
  loadModels();
}

start();
