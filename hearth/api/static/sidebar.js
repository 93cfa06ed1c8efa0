// The conversation list: pick one, rename it in place (double-click or the pencil), delete it
// (the bin, then once more to confirm).

const $ = (id) => document.getElementById(id);

/** Draw the list; `actions`: { open(id), rename(id, title), remove(id) }. */
export function renderSidebar(store, currentId, busyId, actions) {
  const list = $("chats");
  list.textContent = "";
  for (const chat of store.list()) {
    const item = document.createElement("div");
    item.className = "chat-item" + (chat.id === currentId ? " current" : "") + (chat.id === busyId ? " busy" : "");
    item.dataset.id = chat.id;
    const title = document.createElement("button");
    title.type = "button";
    title.className = "chat-title";
    title.textContent = chat.title;
    title.title = chat.title;
    title.onclick = () => actions.open(chat.id);
    title.ondblclick = () => startRename(item, chat, actions);
    item.append(title, iconButton("rename", "Rename", "✎", () => startRename(item, chat, actions)),
                iconButton("delete", "Delete", "×", (e) => confirmDelete(e.currentTarget, chat, actions)));
    list.append(item);
  }
}

function iconButton(cls, label, glyph, onclick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = `icon ${cls}`;
  b.title = label;
  b.setAttribute("aria-label", label);
  b.textContent = glyph;
  b.onclick = onclick;
  return b;
}

function startRename(item, chat, actions) {
  const input = document.createElement("input");
  input.className = "rename-input";
  input.value = chat.title;
  let done = false;
  const finish = (commit) => {
    if (done) return;
    done = true;
    if (commit) actions.rename(chat.id, input.value);
    else actions.refresh();
  };
  input.onkeydown = (e) => {
    if (e.key === "Enter") { e.preventDefault(); finish(true); }
    if (e.key === "Escape") finish(false);
  };
  input.onblur = () => finish(true);
  item.replaceChildren(input);
  input.focus();
  input.select();
}

function confirmDelete(button, chat, actions) {
  if (button.classList.contains("confirm")) {
    actions.remove(chat.id);
    return;
  }
  button.classList.add("confirm");
  button.textContent = "Delete?";
  setTimeout(() => { if (button.isConnected) actions.refresh(); }, 3000);
}
