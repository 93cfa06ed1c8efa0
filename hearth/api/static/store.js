// Conversations, kept in the browser's localStorage (nothing is stored on the server).
//
// A conversation: { id, title, named (renamed by hand), created, updated, model,
//   settings: { system, temperature, top_p, max_tokens, tools }   (strings as typed; "" = server default)
//   messages: [{ role: "user", content, images: [{ name, type, url (a data: URL) }] (optional) }
//            | { role: "assistant", content, reasoning, tool_calls: [{id, name, arguments}],
//                state: "streaming" | "done" | "stopped" | "error", error,
//                stats: {model (asked for), answered_by (the response's model), ttft_ms, tokens, tps}}] }
//
// Images make conversations large and localStorage holds a few MB: when the whole does not fit, the
// oldest conversations are written without their images' data ({ name, type, dropped: true }, shown as
// a placeholder) until it does; this page keeps them in memory until it closes, and says so.

const CHATS = "hearth-chats-v1";
const CURRENT = "hearth-current-chat";
export const DEFAULT_SETTINGS = { system: "", temperature: "", top_p: "", max_tokens: "", tools: "" };

export class Store {
  constructor(storage = window.localStorage) {
    this.storage = storage;
    this.error = null;
    this.onError = null;  // (text) => ...: told each time a save leaves something unsaved
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
    const withImages = this.list().filter((c) => c.messages.some((m) => m.images?.some((i) => i.url))).reverse();
    let error;
    for (let bare = 0; bare <= withImages.length; bare++) {  // the oldest conversations' images go first
      const without = new Set(withImages.slice(0, bare));
      try {
        this.storage.setItem(CHATS, JSON.stringify(this.chats.map((c) => (without.has(c) ? withoutImages(c) : c))));
        this.error = bare ? `The browser's storage is full: the images of ${bare} conversation${bare > 1 ? "s" : ""} `
          + "were not saved (they stay until this page is closed; after that, a placeholder shows where each was)" : null;
        if (this.error) this.onError?.(this.error);
        return;
      } catch (e) {
        error = e;
      }
    }
    this.error = `could not save the conversations (${error.name}): the browser's storage may be full`;
    this.onError?.(this.error);
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

/** `chat` as stored when its images do not fit: each image's name and type, not its data. */
function withoutImages(chat) {
  const bare = (m) => (m.images ? { ...m, images: m.images.map(({ url, ...rest }) => ({ ...rest, dropped: true })) } : m);
  return { ...chat, messages: chat.messages.map(bare) };
}

/** A title from the first user message, until the user names the conversation. */
export function autoTitle(chat) {
  if (chat.named) return;
  const first = chat.messages.find((m) => m.role === "user");
  if (!first) return;
  const line = first.content.trim().split("\n")[0] || first.images?.[0]?.name || "";  // an image alone: its name
  chat.title = line.length > 48 ? line.slice(0, 47) + "…" : line || "New chat";
}
