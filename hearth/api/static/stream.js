// One streamed answer from POST /v1/chat/completions: the request body from a conversation, the
// SSE reader, and the accumulation of deltas (content, reasoning, tool calls) into the message.

/** The request body for `chat` (its messages so far, without the answer being written). */
export function requestBody(chat, model) {
  const s = chat.settings;
  const messages = [];
  if (s.system.trim()) messages.push({ role: "system", content: s.system });
  for (const m of chat.messages) {
    if (m.role === "user") messages.push({ role: "user", content: userContent(m) });
    else if (m.role === "tool") messages.push({ role: "tool", tool_call_id: m.tool_call_id, content: m.content });
    else if (m.state !== "error" && m.state !== "streaming" && (m.content || m.tool_calls.length)) {
      messages.push(assistantTurn(m));
    }
  }
  const body = { model, messages, stream: true, stream_options: { include_usage: true } };
  for (const [key, parse] of [["temperature", parseFloat], ["top_p", parseFloat], ["max_tokens", (v) => parseInt(v, 10)]]) {
    const value = parse(s[key]);
    if (String(s[key]).trim() !== "" && !Number.isNaN(value)) body[key] = value;
  }
  const tools = parseTools(s.tools);
  if (tools) body.tools = tools;
  return body;
}

// a user turn with images: OpenAI content parts, its images (data URLs) then its text; else the text alone.
// An image the browser's storage did not keep (store.js: no url) cannot go: its placeholder says so.
function userContent(m) {
  const images = (m.images || []).filter((i) => i.url);
  if (!images.length) return m.content;
  const parts = images.map((i) => ({ type: "image_url", image_url: { url: i.url } }));
  return m.content ? [...parts, { type: "text", text: m.content }] : parts;
}

// as the model wrote it, less its reasoning (templates leave earlier turns' thinking out)
function assistantTurn(m) {
  const turn = { role: "assistant", content: splitThink(m.content)[1] };
  if (m.tool_calls?.length) {
    turn.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: "function",
                                                 function: { name: c.name, arguments: c.arguments } }));
  }
  return turn;
}

/** The tools field as typed: "" -> null; else a JSON array of OpenAI function tools, or an Error. */
export function parseTools(text) {
  if (!String(text || "").trim()) return null;
  const tools = JSON.parse(text);  // a SyntaxError names the position
  if (!Array.isArray(tools)) throw new Error("tools: must be a JSON array of {type: \"function\", function: {...}}");
  return tools;
}

/** Send `body`, feed `message` the deltas as they come, call `onUpdate` after each network read. */
export async function streamAnswer(body, headers, message, signal, onUpdate) {
  const started = performance.now();
  const timing = { first: null, last: null };
  try {
    const response = await fetch("v1/chat/completions", { method: "POST", headers, body: JSON.stringify(body), signal });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const batch of sseBatches(response)) {
      for (const data of batch) {
        if (data === "[DONE]") break;
        applyChunk(message, JSON.parse(data), timing);
      }
      onUpdate();
    }
  } finally {  // a stopped answer keeps its time to first token
    message.stats.ttft_ms = timing.first === null ? null : Math.round(timing.first - started);
    const tokens = message.stats.tokens;
    // decode rate: the tokens after the first, over the time they took
    if (tokens > 1 && timing.last > timing.first) message.stats.tps = (tokens - 1) / ((timing.last - timing.first) / 1000);
  }
}

function applyChunk(message, chunk, timing) {
  if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
  if (chunk.model) message.stats.answered_by = chunk.model;
  if (chunk.usage) message.stats.tokens = chunk.usage.completion_tokens;
  const delta = chunk.choices?.[0]?.delta;
  if (!delta) return;
  const reasoning = delta.reasoning_content ?? delta.reasoning;
  if (delta.content || reasoning || delta.tool_calls?.length) {
    timing.last = performance.now();
    if (timing.first === null) timing.first = timing.last;
  }
  if (delta.content) message.content += delta.content;
  if (reasoning) message.reasoning += reasoning;
  for (const call of delta.tool_calls || []) {
    // OpenAI streams a call as its id and name first, then its arguments in pieces, all under one index
    const index = call.index ?? message.tool_calls.length;
    const into = message.tool_calls[index] ||= { id: "", name: "", arguments: "" };
    if (call.id) into.id = call.id;
    if (call.function?.name) into.name = call.function.name;
    if (call.function?.arguments) into.arguments += call.function.arguments;
  }
}

async function errorText(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    return body.error?.message || body.detail || text;
  } catch {
    return `${response.status} ${response.statusText}: ${text.slice(0, 200)}`;
  }
}

/** The `data:` payloads of an SSE body, in batches: one batch per network read. */
async function* sseBatches(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      const events = buffer.split("\n\n");
      buffer = events.pop();
      const batch = events.flatMap((e) => e.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()));
      if (batch.length) yield batch;
    }
  } finally {
    reader.releaseLock();
  }
}

/** Reasoning written inline as <think>...</think> at the start of the content (a server that did
 * not split it off): -> [reasoning, content]. An unclosed <think> is all reasoning so far. */
export function splitThink(content) {
  const m = /^\s*<think>([\s\S]*?)(?:<\/think>|$)/.exec(content);
  return m ? [m[1], content.slice(m[0].length).replace(/^\s+/, "")] : ["", content];
}
