// The two things that keep model output from becoming markup: text is escaped, and a link's
// target is kept only when it cannot run script.

const ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ENTITIES[c]);
}

/** The URL if it is http(s), mailto or relative; else null. Browsers drop control characters and
 * whitespace inside a URL ("java\tscript:"), so they are dropped before the scheme is read. */
export function safeUrl(url) {
  const clean = String(url).replace(/[\u0000-\u0020\u007f-\u009f]/g, "");
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(clean);
  if (scheme && !["http", "https", "mailto"].includes(scheme[1].toLowerCase())) return null;
  return clean;
}
