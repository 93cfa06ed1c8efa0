// Images attached in the composer before they are sent: from the file picker, a paste or a drop, read
// as data: URLs (what an OpenAI image_url part carries), shown as thumbnails with a remove button.
//
// An attached image: { name, type, url }   (url: "data:image/png;base64,...")

import { thumbnails } from "./view.js";

export const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
// its data URL (4/3 of it) must fit in the server's 16 MiB request body (hearth's max_body_bytes)
export const MAX_IMAGE_BYTES = 12 * 2 ** 20;

export class Attachments {
  /** `box`: where the thumbnails go; `onChange()`: after each add or remove. */
  constructor(box, onChange = () => {}) {
    this.box = box;
    this.onChange = onChange;
    this.images = [];
  }

  /** Read `files` and attach the images among them; -> what was refused, as a sentence ("" if none). */
  async add(files) {
    const refused = [];
    for (const file of files) {
      if (!IMAGE_TYPES.includes(file.type)) refused.push(`${file.name || "a file"} (not PNG, JPEG, GIF or WEBP)`);
      else if (file.size > MAX_IMAGE_BYTES) refused.push(`${file.name} (larger than ${MAX_IMAGE_BYTES / 2 ** 20} MiB)`);
      else {
        try {
          this.images.push({ name: file.name || "image", type: file.type, url: await dataUrl(file) });
        } catch (e) {
          refused.push(`${file.name} (${e.message})`);  // unreadable: gone from the disk, say
        }
      }
    }
    this.render();
    return refused.length ? `not attached: ${refused.join(", ")}.` : "";
  }

  remove(i) {
    this.images.splice(i, 1);
    this.render();
  }

  /** The attached images, handed over (the composer is empty after). */
  take() {
    const images = this.images;
    this.images = [];
    this.render();
    return images;
  }

  render() {
    this.box.replaceChildren(thumbnails(this.images, (item, image, i) => {
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "icon remove";
      remove.textContent = "×";
      remove.title = `Remove ${image.name}`;
      remove.setAttribute("aria-label", remove.title);
      remove.onclick = () => this.remove(i);
      item.append(remove);
    }));
    this.box.hidden = !this.images.length;
    this.onChange();
  }
}

/** Images come from the attach `button`'s file `picker`, a paste into the message `input` or a file
 * dropped anywhere on the page (`drop` is marked while one is dragged over and `wanted()`). onFiles(files):
 * what came, to attach or refuse; a paste that also holds text pastes the text and hands the files over
 * only when they are wanted (a copied document's picture, say). */
export function listenForImages({ button, picker, input, drop }, { wanted, onFiles }) {
  picker.accept = IMAGE_TYPES.join(",");
  button.onclick = () => picker.click();
  picker.onchange = () => { onFiles(filesOf(picker)); picker.value = ""; };
  input.addEventListener("paste", (e) => {
    const files = filesOf(e.clipboardData);
    if (!files.length) return;  // text: pasted as always
    if (!e.clipboardData.types.includes("text/plain")) e.preventDefault();
    else if (!wanted()) return;
    onFiles(files);
  });
  // a file dropped where nothing takes it opens in the tab, leaving the page: every file drop is the page's
  document.addEventListener("dragover", (e) => {
    if (!carriesFiles(e.dataTransfer)) return;
    e.preventDefault();
    drop.classList.toggle("dropping", wanted());
  });
  document.addEventListener("dragleave", (e) => { if (!e.relatedTarget) drop.classList.remove("dropping"); });
  document.addEventListener("drop", (e) => {
    if (!carriesFiles(e.dataTransfer)) return;
    e.preventDefault();
    drop.classList.remove("dropping");
    onFiles(filesOf(e.dataTransfer));
  });
}

/** The files a paste or a drop carries (a DataTransfer, or the file input); [] when none (pasted text). */
function filesOf(from) {
  return [...(from?.files || [])];
}

/** Whether a drag carries files (dragover cannot read them yet, only their kinds). */
function carriesFiles(transfer) {
  return [...(transfer?.types || [])].includes("Files");
}

function dataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}
