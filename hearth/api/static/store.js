// Conversations, kept in the browser's localStorage (nothing is stored on the server).
//
// A conversation: { id, title, named (renamed by hand), created, updated, model,
//   settings: { system, temperature, top_p, max_tokens, tools }   (strings as typed; "" = server default)
//   messages: [{ role: "user", content }
//            | { role: "assistant", content, reasoning, tool_calls: [{id, name, arguments}],
//                state: "streaming" | "done" | "stopped" | "error", error,
//                stats: {model (asked for), answered_by (the response's model), ttft_ms, tokens, tps}}] }

const CHATS = "hearth-chats-v1";
const CURRENT = "hearth-current-chat";
export const DEFAULT_SETTINGS = { system: "", temperature: "", top_p: "", max_tokens: "", tools: "" };

export class Store {
  constructor(storage = window.localStorage) {
    this.storage = storage;
    this.error = null;
    try {
      this.chats = JSON.parse(storage.getItem(CHATS) || "[]");
    } catch {
      this.chats = [];  // unreadable (edited by hand?): start over rather than not start
    }
    for (const chat of this.chats) {  // an answer cut by a reload is a stopped one
      for (const m of chat.messages) if (m.state === "streaming") m.state = "stopped";
    }
  }

  /** Newest first. */
  list() {
    return [...this.chats].sort((a, b) => b.updated - a.updated);
  }

  get(id) {
    return this.chats.find((c) => c.id === id) || null;
  }

  get currentId() {
    return this.storage.getItem(CURRENT);
  }

  set currentId(id) {
    this.storage.setItem(CURRENT, id);
  }

  create(model, settings = DEFAULT_SETTINGS) {
    const now = Date.now();
    const chat = { id: `c${now.toString(36)}${Math.random().toString(36).slice(2, 6)}`, title: "New chat",
                   named: false, created: now, updated: now, model, settings: { ...settings }, messages: [] };
    this.chats.push(chat);
    this.save(chat);
    return chat;
  }

  /** Persist everything; `chat` (when given) moves to the top of the list. */
  save(chat) {
    if (chat) chat.updated = Date.now();
    try {
      this.storage.setItem(CHATS, JSON.stringify(this.chats));
      this.error = null;
    } catch (e) {
      this.error = `could not save the conversations (${e.name}): the browser's storage may be full`;
    }
  }

  rename(id, title) {
    const chat = this.get(id);
    if (!chat || !title.trim()) return;
    chat.title = title.trim();
    chat.named = true;
    this.save();
  }

  remove(id) {
    this.chats = this.chats.filter((c) => c.id !== id);
    this.save();
  }
}

/** A title from the first user message, until the user names the conversation. */
export function autoTitle(chat) {
  if (chat.named) return;
  const first = chat.messages.find((m) => m.role === "user");
  if (!first) return;
  const line = first.content.trim().split("\n")[0];
  chat.title = line.length > 48 ? line.slice(0, 47) + "…" : line || "New chat";
}
