// Simple syntax highlighting for fenced code: one pass of a regex per language family that finds
// comments, strings, numbers and words; keywords and literals get a class. Every piece of the code
// is HTML-escaped, highlighted or not. Not a parser: good enough to read code at a glance.

import { escapeHtml } from "./escape.js";

const words = (s) => new Set(s.split(" "));
const C_COMMENT = String.raw`\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)`;
const HASH_COMMENT = String.raw`#[^\n]*`;
const QUOTED = String.raw`"(?:\\[\s\S]|[^"\\\n])*"?|'(?:\\[\s\S]|[^'\\\n])*'?`;
const NUMBER = String.raw`\b(?:0[xob][\da-fA-F_]+|\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?)[a-zA-Z]*\b`;

// a family: its comment and string syntax, its keywords and literals
const FAMILIES = {
  python: {
    comment: HASH_COMMENT, string: String.raw`[rbfuRBFU]{0,2}(?:"""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)|${QUOTED})`,
    keywords: words("and as assert async await break class continue def del elif else except finally for from " +
      "global if import in is lambda match case nonlocal not or pass raise return try while with yield self"),
    literals: words("True False None"),
  },
  js: {
    comment: C_COMMENT, string: String.raw`${QUOTED}|\x60(?:\\[\s\S]|[^\x60\\])*\x60?`,
    keywords: words("async await break case catch class const continue debugger default delete do else export " +
      "extends finally for from function if import in instanceof let new of return static super switch this " +
      "throw try typeof var void while with yield interface type enum implements private public readonly"),
    literals: words("true false null undefined NaN Infinity"),
  },
  c: {
    comment: C_COMMENT, string: QUOTED,
    keywords: words("auto break case char class const constexpr continue default delete do double else enum " +
      "extern float for goto if inline int long namespace new private protected public register return short " +
      "signed sizeof static struct switch template this throw try catch typedef typename union unsigned using " +
      "virtual void volatile while bool import package func go defer chan map range select var type fn let mut " +
      "impl trait pub mod use match loop move ref where as crate self Self final extends implements interface " +
      "abstract throws override val fun when object"),
    literals: words("true false null nullptr NULL nil None Some Ok Err"),
  },
  bash: {
    comment: HASH_COMMENT, string: QUOTED,
    keywords: words("if then else elif fi for while until do done case esac in function return local export " +
      "echo cd set unset source exit sudo"),
    literals: words("true false"),
  },
  sql: {
    comment: String.raw`--[^\n]*`, string: QUOTED, caseless: true,
    keywords: words("select from where and or not insert into values update set delete create table drop alter " +
      "index join left right inner outer on group by order having limit offset as distinct union all primary " +
      "key foreign references default is in like between case when then else end with"),
    literals: words("null true false"),
  },
  json: { comment: "(?!)", string: QUOTED, keywords: new Set(), literals: words("true false null") },
};
const ALIASES = {
  py: "python", python3: "python", javascript: "js", ts: "js", typescript: "js", jsx: "js", tsx: "js", mjs: "js",
  c: "c", h: "c", cpp: "c", "c++": "c", cc: "c", hpp: "c", java: "c", go: "c", golang: "c", rust: "c", rs: "c",
  cs: "c", csharp: "c", kotlin: "c", kt: "c", swift: "c", scala: "c", cuda: "c",
  sh: "bash", shell: "bash", zsh: "bash", console: "bash", bash: "bash",
  sql: "sql", json: "json", jsonc: "js", toml: "bash", yaml: "bash", yml: "bash", ini: "bash",
};
const PATTERNS = new Map();

function pattern(name) {
  if (!PATTERNS.has(name)) {
    const f = FAMILIES[name];
    // groups: 1 comment, 2 string, 3 number, 4 word
    PATTERNS.set(name, new RegExp(`(${f.comment})|(${f.string})|(${NUMBER})|([A-Za-z_$][\\w$]*)`, "g"));
  }
  return PATTERNS.get(name);
}

/** Code -> HTML with <span class="tok-*"> around comments, strings, numbers, keywords, literals. */
export function highlight(code, lang) {
  const name = FAMILIES[lang] ? lang : ALIASES[(lang || "").toLowerCase()];
  if (!name) return escapeHtml(code);
  const family = FAMILIES[name];
  const re = pattern(name);
  let out = "";
  let last = 0;
  re.lastIndex = 0;
  for (let m; (m = re.exec(code)) !== null;) {
    if (m[0] === "") { re.lastIndex++; continue; }
    out += escapeHtml(code.slice(last, m.index));
    out += wrap(kind(m, family), m[0]);
    last = re.lastIndex;
  }
  return out + escapeHtml(code.slice(last));
}

function kind(m, family) {
  if (m[1] !== undefined) return "c";
  if (m[2] !== undefined) return "s";
  if (m[3] !== undefined) return "n";
  const word = family.caseless ? m[4].toLowerCase() : m[4];
  if (family.keywords.has(word)) return "k";
  if (family.literals.has(word)) return "l";
  return null;
}

function wrap(cls, text) {
  return cls ? `<span class="tok-${cls}">${escapeHtml(text)}</span>` : escapeHtml(text);
}
