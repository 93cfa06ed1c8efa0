// A small, safe markdown renderer for model answers: headings, paragraphs, lists (nested),
// block quotes, tables, rules, fenced code (highlighted, with a copy button); inline code,
// emphasis, strike-through, links. All text is HTML-escaped; links keep only safe targets.
// Lenient where models are sloppy (any indent nests a list) and where answers are still
// streaming (an unclosed fence is a code block up to the end).

import { escapeHtml, safeUrl } from "./escape.js";
import { highlight } from "./highlight.js";

const FENCE = /^( {0,3})(`{3,}|~{3,})\s*([^\s`]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])(\s+|$)(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

/** Markdown text -> HTML. */
export function renderMarkdown(text) {
  return blocks(String(text).replace(/\r\n?/g, "\n").replace(/\u0000/g, "").split("\n"));
}

const indentOf = (line) => line.match(/^\s*/)[0].replace(/\t/g, "    ").length;
const blank = (line) => line.trim() === "";

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

// block parsers: each takes (lines, i) and returns [html, next i] or null when line i is not its kind
const PARSERS = [fence, heading, rule, quote, list, table, paragraph];

function blocks(lines) {
  let html = "";
  for (let i = 0; i < lines.length;) {
    if (blank(lines[i])) { i++; continue; }
    for (const parse of PARSERS) {
      const got = parse(lines, i);
      if (got) { html += got[0]; i = got[1]; break; }
    }
  }
  return html;
}

function fence(lines, i) {
  const open = FENCE.exec(lines[i]);
  if (!open) return null;
  const [, indent, marks, lang] = open;
  const close = new RegExp(`^\\s*${marks[0] === "`" ? "`" : "~"}{${marks.length},}\\s*$`);
  const code = [];
  let j = i + 1;
  for (; j < lines.length && !close.test(lines[j]); j++) {
    code.push(lines[j].startsWith(indent) ? lines[j].slice(indent.length) : lines[j].trimStart());
  }
  return [codeBlock(code.join("\n"), lang), j + 1];
}

export function codeBlock(code, lang) {
  const label = escapeHtml(lang || "code");
  return `<div class="code-block"><div class="code-head"><span class="code-lang">${label}</span>` +
    `<button type="button" class="copy" title="Copy code">Copy</button></div>` +
    `<pre><code class="lang-${label}">${highlight(code, lang)}</code></pre></div>`;
}

function heading(lines, i) {
  const m = HEADING.exec(lines[i]);
  return m && [`<h${m[1].length}>${inline(m[2])}</h${m[1].length}>`, i + 1];
}

function rule(lines, i) {
  return RULE.test(lines[i]) ? ["<hr>", i + 1] : null;
}

function quote(lines, i) {
  if (!QUOTE.test(lines[i])) return null;
  const inner = [];
  let j = i;
  for (; j < lines.length && !blank(lines[j]); j++) inner.push(lines[j].replace(QUOTE, ""));
  return [`<blockquote>${blocks(inner)}</blockquote>`, j];
}

function list(lines, i) {
  const first = ITEM.exec(lines[i]);
  if (!first) return null;
  const ordered = /\d/.test(first[2]);
  const indent = indentOf(lines[i]);
  const items = [];
  let j = i;
  while (j < lines.length) {
    const m = ITEM.exec(lines[j]);
    if (!m || indentOf(lines[j]) !== indent || /\d/.test(m[2]) !== ordered) break;
    const [body, next] = listItem(lines, j, indent, m);
    items.push(body);
    j = next;
  }
  const start = ordered && parseInt(first[2], 10) !== 1 ? ` start="${parseInt(first[2], 10)}"` : "";
  const tag = ordered ? "ol" : "ul";
  return [`<${tag}${start}>${items.map((b) => `<li>${b}</li>`).join("")}</${tag}>`, j];
}

// One item: its first line's text, then the lines indented past its marker (dedented), lazy
// continuation lines, and blank lines inside it. Returns [html, next i].
function listItem(lines, i, indent, m) {
  const contentIndent = indent + m[2].length + Math.max(1, m[3].length);
  const body = [m[4]];
  let j = i + 1;
  for (; j < lines.length; j++) {
    const line = lines[j];
    if (blank(line)) {
      const next = lines.slice(j + 1).find((l) => !blank(l));
      if (next === undefined || indentOf(next) <= indent) break;
      body.push("");
    } else if (indentOf(line) > indent) {
      body.push(line.replace(/^\s*/, (s) => s.slice(Math.min(s.length, contentIndent))));
    } else if (!startsBlock(line) && !blank(lines[j - 1])) {
      body.push(line.trim());  // lazy continuation of the item's paragraph
    } else {
      break;
    }
  }
  while (j < lines.length && blank(lines[j])) {  // blank lines between items keep the list going
    const next = lines.slice(j).find((l) => !blank(l));
    if (!next || !ITEM.test(next) || indentOf(next) !== indent) break;
    j++;
  }
  const html = blocks(body);
  const tight = html.match(/^<p>((?:(?!<\/?p>)[\s\S])*)<\/p>(?=<[uo]l|$)/);  // a lone first paragraph: no <p> in an item
  return [tight ? tight[1] + html.slice(tight[0].length) : html, j];
}

function table(lines, i) {
  if (!lines[i].includes("|") || i + 1 >= lines.length || !TABLE_RULE.test(lines[i + 1])) return null;
  const align = cells(lines[i + 1]).map((c) => (/^:-+:$/.test(c) ? "center" : /-:$/.test(c) ? "right" : ""));
  const row = (line, tag) => "<tr>" + cells(line).map((c, k) =>
    `<${tag}${align[k] ? ` style="text-align:${align[k]}"` : ""}>${inline(c)}</${tag}>`).join("") + "</tr>";
  let j = i + 2;
  let body = "";
  for (; j < lines.length && lines[j].includes("|") && !blank(lines[j]); j++) body += row(lines[j], "td");
  return [`<div class="table-wrap"><table><thead>${row(lines[i], "th")}</thead><tbody>${body}</tbody></table></div>`, j];
}

function cells(line) {
  return line.trim().replace(/^\||\|$/g, "").split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function paragraph(lines, i) {
  const text = [lines[i]];
  let j = i + 1;
  for (; j < lines.length && !blank(lines[j]) && !startsBlock(lines[j]); j++) text.push(lines[j]);
  return [`<p>${text.map((l) => inline(l.trim())).join("<br>")}</p>`, j];
}

/** Inline markdown -> HTML: code spans and links are cut out first (so emphasis never reaches
 * into them), the rest is escaped, emphasized, and the cut-outs put back. */
export function inline(text) {
  const held = [];
  const hold = (html) => `\u0000${held.push(html) - 1}\u0000`;
  let s = text.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, __, code) => hold(`<code>${escapeHtml(code.trim() || code)}</code>`));
  s = s.replace(/\[([^\]\n]+)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g, (all, label, url) => {
    const href = safeUrl(url);
    return href === null ? hold(escapeHtml(label)) : hold(link(href, emphasis(escapeHtml(label))));
  });
  s = s.replace(/\bhttps?:\/\/[^\s<>"'`]*[^\s<>"'`.,:;!?)\]]/g, (url) => hold(link(url, escapeHtml(url))));
  s = emphasis(escapeHtml(s));
  return s.replace(/\u0000(\d+)\u0000/g, (_, k) => held[Number(k)]);
}

function link(href, labelHtml) {
  return `<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer">${labelHtml}</a>`;
}

function emphasis(html) {
  return html
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
    .replace(/(^|[^*\w])\*(?=[^\s*])([^*]*?[^\s*])\*(?!\*)/g, "$1<em>$2</em>")
    .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, "$1<em>$2</em>")
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
}
