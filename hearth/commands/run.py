"""`hearth run [MODEL] [PROMPT]`: stream a chat answer to the terminal (interactive without PROMPT),
in the manner of `ollama run`; a model without a chat template of its own (a base model) completes
the text instead, as llama-cli does (its conversation mode is on only when the GGUF has a template).
Here: its flags, the interactive loop and the checks made before the first answer; the model and prompt
are read by hearth.commands.run_input, each answer streamed by hearth.commands.run_answer."""

from __future__ import annotations

import argparse
import os
import re
import sys

from hearth.commands.human_ints import token_count
from hearth.commands.prompt_line import TerminalLines
from hearth.commands.lora_flags import add_lora_arguments, lora_entries
from hearth.commands.output_flags import add_output_arguments, structured_output
from hearth.commands.run_answer import (CONTEXT_FULL, DEFAULT_MAX_TOKENS, INTERRUPTED_ANSWER, MAX_TOKENS, answer,
                                        cut_notice, full_notice)
from hearth.commands.run_input import Words, model_flag, piped_input
from hearth.commands.sampling_flags import (LLAMA_SAMPLER_FLAGS, add_llama_sampler_arguments, breaker_list, llama_int,
                                            sampler_flag)
from hearth.commands.vision_flags import add_vision_arguments, image_part, image_parts
from hearth.commands.rope_flags import add_rope_arguments, rope_freq_base, rope_scaling
from hearth.commands.template_flags import add_template_arguments, chat_template, chat_template_kwargs
from hearth.commands.threads_flag import THREADS_HELP, thread_count
from hearth.commands.serve_speculation import add_speculation_arguments, check_drafts_fit, k_flag, speculative_config
from hearth.commands.models_file import check_kv
from hearth.config import DEFAULT_MODEL, DEVICES
from hearth.formats.kv import SERVED_KV
from hearth.errors import HearthError, can_raise_context

UNTIL_FULL = (-1, -2)  # llama-cli's -n: -1 until an end token (its "infinity"), -2 until the context is full; here,
# without a context shift, both run to an end token or the context's end
HELP = ('/bye (or Ctrl-D) to quit, /clear to forget the conversation, """ to begin and end a message of '
        'several lines, /help for this line')
IMAGE_HELP = ", /image FILE (or URL) to add an image to the next message"  # llama-mtmd-cli's; with --mmproj
FENCE = '"""'  # ollama's: a line opening with it begins one message of several lines, one ending with it ends it
# A line whose first word is a slash and a name (`/foo`, `/set x`) is a command; `/ ...` or a path
# (`/usr/bin/env is ...`) is text a user may mean for the model, so it goes to it (ollama refuses any
# leading slash): a path names no command, and a word is what a mistyped command looks like.
COMMAND = re.compile(r"/[A-Za-z?][\w?-]*")
OTHER_COMMANDS = {
    "/set": "hearth run takes its settings as flags at start (--temperature, --top-k, --system, --max-tokens, ...: "
            "hearth run --help); /bye and run again to change them",
    "/show": "hearth plan MODEL shows the model's architecture, sizes and limits; a server's GET /props its chat "
             "template",
    "/load": "hearth run chats with one model: /bye and hearth run OTHER",
    "/save": "hearth run keeps no sessions; hearth serve --kv-disk-dir keeps prompts' KV on disk",
}
"""ollama's commands that hearth run has not -> what it does instead (said after "Unknown command")."""
CLEARED = "Cleared session context"  # ollama's words for /clear
INTERRUPTED = "Use Ctrl + d or /bye to exit."  # ollama's words when Ctrl-C meets its prompt
EPILOG = ("A model with a chat template of its own (an instruct model) chats: PROMPT, or each line typed, is "
          "a user message, and the conversation is remembered. A model without one (a base model such as "
          "gemma3-270m) completes text instead, as llama-cli does: PROMPT, or each line on its own, is "
          "continued as written, and stdout gets the continuation. --chat or --raw picks either for any model. "
          "A pipe or file on stdin is one prompt, read whole (before PROMPT, if given), as ollama run reads it.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=None,
                   help=f"catalog name, path to a .gguf file, or org/repo:file.gguf (default: {DEFAULT_MODEL})")
    # llama-cli's -m: without it argparse read `-m FILE` as -md FILE (a draft model) and the prompt as the model
    p.add_argument("-m", "--model", dest="model_flag", default=None, metavar="MODEL",
                   help="MODEL as llama-cli's -m spells it; a word after it is then the prompt")
    p.add_argument("prompt", nargs="*", action=Words, help="answer (or complete) this prompt and exit, after what a pipe or file "
                                             "on stdin holds, as ollama run takes it: several words are one prompt "
                                             "(default: interactive)")
    p.epilog = EPILOG
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--chat", "-cnv", dest="mode", action="store_const", const="chat",
                      help="chat even with a model that has no chat template, in a built-in one (Gemma's turns "
                           "for gemma models, ChatML for the others; llama-cli's -cnv)")
    mode.add_argument("--raw", "-no-cnv", dest="mode", action="store_const", const="text",
                      help="complete the prompt (or each line) as plain text, no chat template, whatever the "
                           "model (llama-cli's -no-cnv)")
    p.add_argument("-p", "--prompt", dest="prompt_flag", default=None, metavar="PROMPT",
                   help="PROMPT as llama-cli's -p spells it")
    p.add_argument("-f", "--file", dest="prompt_file", default=None, metavar="FILE",
                   help="the prompt is this file's text (llama-cli's -f)")
    p.add_argument("--system", "-sys", "--system-prompt", help="system prompt (a chat's; -sys: llama-cli's)")
    p.add_argument("--temperature", "--temp", type=float, default=0.7,
                   help="0: greedy; --temp: llama-cli's spelling (default: %(default)s)")
    p.add_argument("--top-p", type=float, default=0.95, help="(default: %(default)s)")
    p.add_argument("--top-k", type=llama_int, default=0, help="0: off (default: %(default)s)")
    p.add_argument("--min-p", type=float, default=0.0, help="0: off (default: %(default)s)")
    p.add_argument("--typical-p", "--typical", type=float, default=1.0,
                   help="locally typical sampling's mass, 1: off; --typical: llama-cli's spelling "
                        "(default: %(default)s)")
    p.add_argument("--repetition-penalty", "--repeat-penalty", type=float, default=1.0,
                   help="1: off; --repeat-penalty: llama-cli's spelling (default: %(default)s)")
    p.add_argument("--presence-penalty", type=float, default=0.0, help="(default: %(default)s)")
    p.add_argument("--frequency-penalty", type=float, default=0.0, help="(default: %(default)s)")
    add_llama_sampler_arguments(p.add_argument_group("llama.cpp's samplers (default: off; --repeat-last-n unset: "
                                                     "the penalties read the whole context)"))
    # -n spelled out: argparse read llama-cli's `-n 10` as an abbreviation of -no-cnv and 10 as the prompt
    p.add_argument("--max-tokens", "-n", "--n-predict", type=int, default=None,
                   help="longest answer in tokens; more than the context has left is an error; -1 or -2: "
                        "until an end token or the context is full (llama-cli's) "
                        f"(default: {DEFAULT_MAX_TOKENS}, or what the context has left; -n/--n-predict: "
                        "llama-cli's spelling)")
    add_output_arguments(p)
    p.add_argument("--stop", "-r", "--reverse-prompt", action="append", default=[], metavar="STRING",
                   help="end the answer where this text comes, without it (repeat for more; ollama's stop, "
                        "llama-cli's -r)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="go on past the model's end token, to --max-tokens (llama-cli's)")
    p.add_argument("--seed", "-s", type=int, default=None,
                   help="seed of the sampler; -s: llama-cli's spelling (default: none, a new draw each time)")
    p.add_argument("--threads", "-t", type=thread_count, default=0, help=f"CPU threads; {THREADS_HELP} (default: 0)")
    p.add_argument("--device", default="auto", choices=DEVICES, help="cpu, torch (the reference) or cuda (default: %(default)s)")
    p.add_argument("--ctx", "-c", "--ctx-size", type=token_count, default=4096, metavar="N",
                   help="context length in tokens (or 32k, 32K, auto), at most the model's; 0: the model's; "
                        "-c/--ctx-size: llama-cli's spelling (default: %(default)s)")
    p.add_argument("--kv-cache-dtype", default="auto",  # llama-cli's -ctk/-ctv become it (hearth.commands.peer_values)
                   help=f"KV-cache format: auto (f16), {', '.join(SERVED_KV)}, as serve takes them (default: %(default)s)")
    p.add_argument("--verbose", action="store_true", help="print timings after each answer (with speculation: drafted and accepted tokens, acceptance length), "
                                                      "and hearth's notes on the load (its info log lines: a default speculative K lowered to fit --ctx)")
    add_rope_arguments(p)  # serve's flags, parsed and checked by the same code
    add_template_arguments(p)
    add_speculation_arguments(p)
    add_lora_arguments(p)
    add_vision_arguments(p, images=True)


def main(args: argparse.Namespace) -> int:
    from hearth.engine.encoder_core import embedding_only
    from hearth.llm import LLM
    from hearth.llm_vision import reads_images

    model_flag(args)
    if args.system and args.mode == "text":
        raise HearthError("--system is a chat's, and --raw completes text: drop one of them")
    if args.prompt is not None and not args.prompt.strip():  # omitted: interactive; given empty: a slip
        raise HearthError("the prompt is empty")
    piped = piped_input()
    if args.prompt is not None:  # `cat notes.md | hearth run m "summarize"`: the notes, then PROMPT
        args.prompt = f"{piped}\n\n{args.prompt}" if piped else args.prompt
    elif piped:  # `printf 'a\nb\n' | hearth run m`: one prompt, as ollama run reads it (was a turn per line)
        args.prompt = piped
    if args.verbose:
        from hearth.commands.logs import configure_logging

        configure_logging("info", terminal=True)
    speculation = speculative_config(args)  # a bad value is one line before the model loads
    check_kv(args.kv_cache_dtype, "--kv-cache-dtype")
    rope, template = rope_scaling(args), chat_template(args)
    if speculation is not None:
        check_drafts_fit(speculation, header_context(args.model, args.ctx, rope)[0], k_flag(args))
    params = sampling_params(args)
    images = image_parts(args)  # read before the load, as the prompt's files are
    until_full = args.max_tokens in UNTIL_FULL
    llm = LLM(args.model, threads=args.threads, max_model_len=args.ctx, max_num_seqs=1, device=args.device,
              speculative_config=speculation, rope_scaling=rope, rope_freq_base=rope_freq_base(args),
              chat_template=template, chat_template_kwargs=chat_template_kwargs(args), lora=lora_entries(args),
              mmproj=args.mmproj, kv_cache_dtype=args.kv_cache_dtype)
    if llm.embeds_only or llm.reranker:  # as llama-cli refuses an --embedding model's prompt
        route = "/v1/rerank" if llm.reranker else "/v1/embeddings"
        raise HearthError(f"{args.model}: {embedding_only(llm.model_config.arch, llm.reranker)}: serve it with "
                          f"`hearth serve` and POST {route}")
    check_max_tokens_fit(args.max_tokens, llm.max_model_len, llm.engine.model_context)
    if args.verbose and llm.vision_config is not None:  # serve's startup line
        print(f"hearth: {args.model} {reads_images(llm.vision_config, args.mmproj)}", file=sys.stderr)
    chat, note = conversation(args, llm)
    if args.system and not chat:
        raise HearthError(f"{args.model} has no chat template, so --system has no place in its prompt: "
                          "add --chat to chat in a built-in template, or drop --system")
    if images and not chat:  # its prompt is text; an image has no place in it
        raise HearthError(f"{args.model} has no chat template, and --image needs a chat: add --chat to chat in a "
                          "built-in template")
    history = [{"role": "system", "content": args.system}] if args.system else []
    if args.prompt is not None:  # 130 after Ctrl-C (128 + SIGINT, the shell's): a script tells a cut answer from a whole one
        end = answer(llm, history if chat else None, args.prompt, params, args.verbose, note, until_full, images)
        if end == CONTEXT_FULL:
            print(full_notice(llm), file=sys.stderr)
        elif end == MAX_TOKENS and (cut := cut_notice(args.max_tokens, params.structured_output is not None)):
            print(cut, file=sys.stderr)
        return 130 if end == INTERRUPTED_ANSWER else 0
    if note:
        print(note, file=sys.stderr)
    interactive = sys.stdin.isatty()
    posix_tty = interactive and os.name == "posix"  # TerminalLines waits in select(): a POSIX tty's
    read = TerminalLines(sys.stdin.fileno()).read if posix_tty else input
    help_line = HELP + (IMAGE_HELP if args.mmproj and chat else "")
    if interactive:
        print(f"{'Send a message' if chat else 'Type text to complete'} ({help_line})", file=sys.stderr)
    pending = list(images)  # the next message's images: --image's for the first, then /image's
    failed = False  # a piped line that got no answer: the exit status says so (a script checks it)
    while True:
        try:
            line = read(">>> " if interactive else "")
            if line.lstrip().startswith(FENCE):
                line = read_block(line.lstrip(), read, "... " if interactive else "")
        except EOFError:
            return 1 if failed else 0
        except KeyboardInterrupt:  # as ollama: the line typed so far is dropped, a fresh prompt
            if not interactive:
                raise
            print(f"\n{INTERRUPTED}", file=sys.stderr)
            continue
        text = line.strip()
        if text in ("/bye", "/exit", "/quit"):
            return 1 if failed else 0
        if text == "/clear":  # a fresh start: --image's images go with its first message again
            history, pending = history[:1] if args.system else [], list(images)
            print(CLEARED, file=sys.stderr)
            continue
        if text in ("/help", "/?"):
            print(help_line, file=sys.stderr)
            continue
        if text == "/image" or text.startswith("/image "):
            try:
                pending.append(_image_command(args, llm.vision_config, chat, text.removeprefix("/image").strip()))
            except HearthError as e:
                failed = failed or not interactive
                print(f"hearth: error: {e}", file=sys.stderr)
            continue
        word = text.split(maxsplit=1)[0] if text else ""
        if COMMAND.fullmatch(word):  # ollama's words; nothing reaches the model
            hint = f" ({OTHER_COMMANDS[word]})" if word in OTHER_COMMANDS else ""
            print(f"Unknown command '{word}'{hint}. Type /help for help", file=sys.stderr)
            continue
        if text:
            try:
                end = answer(llm, history if chat else None, text, params, args.verbose, until_full=until_full,
                             images=pending)
                pending = []  # sent (a message refused keeps them for the next one)
                if end == CONTEXT_FULL:  # said, not mended: no old turn is dropped behind the user's back
                    print(full_notice(llm, "/clear to start over" if chat else "a shorter line"), file=sys.stderr)
                elif end == MAX_TOKENS and (cut := cut_notice(args.max_tokens, params.structured_output is not None)):
                    print(cut, file=sys.stderr)
            except HearthError as e:  # the chat goes on: this message was not added to it
                failed = failed or not interactive
                print(f"hearth: error: {e}" + ("; /clear to start over" if len(history) > 1 else ""),
                      file=sys.stderr)


def _image_command(args: argparse.Namespace, cfg, chat: bool, source: str) -> dict:
    """llama-mtmd-cli's `/image FILE`: the image (a file, an http(s) or data: URL) read and checked now, for
    the next message."""
    if not source:
        raise HearthError("/image needs a file (or an http(s) or data: URL): /image FILE")
    if cfg is None:
        raise HearthError("/image needs the model's vision projector: run with --mmproj FILE")
    if not chat:
        raise HearthError(f"{args.model} has no chat template, and an image needs a chat: run with --chat")
    part = image_part(source, cfg, "/image")
    print(f"{source if not source.lower().startswith('data:') else 'data URL'} image loaded", file=sys.stderr)
    return part


def read_block(first: str, read, prompt: str) -> str:
    """The lines of one message between ollama's fences (the text after the opening one and before the
    closing one included), joined by newlines: a pasted block of code was each line a message of its own."""
    line, lines = first.removeprefix(FENCE), []
    while not line.endswith(FENCE):
        lines.append(line)
        line = read(prompt)
    return "\n".join([*lines, line.removesuffix(FENCE)])


def check_max_tokens_fit(max_tokens: int | None, context: int, model_context: int | None) -> None:
    """--max-tokens that leaves no room for a prompt of even one token fails every prompt: said once,
    before the first (context: the one that runs, --ctx clamped to the model's own, model_context).
    `hearth bench` checks its --max-tokens with it too."""
    if max_tokens is None or max_tokens < context:
        return
    remedy = "lower --max-tokens" + (" or raise --ctx" if can_raise_context(context, model_context) else "")
    raise HearthError(f"--max-tokens {max_tokens} leaves no room for a prompt in the context of {context} "
                      f"tokens (--ctx); {remedy}")


def sampling_params(args: argparse.Namespace):
    """The flags' SamplingParams; a bad value is one line naming its flag (--top-p), not the API's field."""
    from hearth.sampling_params import InvalidSamplingParams, SamplingParams

    if args.max_tokens is not None and args.max_tokens < 1 and args.max_tokens not in UNTIL_FULL:
        raise HearthError(f"--max-tokens must be at least 1, or -1 / -2 (until an end token or the context is full), "
                          f"got {args.max_tokens}")
    llama = {k: v for k in LLAMA_SAMPLER_FLAGS if (v := getattr(args, k)) is not None}
    if (breakers := breaker_list(args.dry_sequence_breakers)) is not None:
        llama["dry_sequence_breakers"] = breakers
    try:
        return SamplingParams(**llama, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
                              typical_p=args.typical_p, repetition_penalty=args.repetition_penalty,
                              presence_penalty=args.presence_penalty, frequency_penalty=args.frequency_penalty,
                              max_tokens=None if args.max_tokens in UNTIL_FULL else args.max_tokens, seed=args.seed,
                              stop=list(args.stop), ignore_eos=args.ignore_eos,
                              structured_output=structured_output(args))
    except InvalidSamplingParams as e:  # every field set here is a flag of the same name, or llama-cli's
        raise HearthError(f"{sampler_flag(e.field)} {e.why}") from None


def header_context(model, ctx: int, rope: dict | None = None) -> tuple[int, int]:
    """(the context --ctx runs at, the model's own: stretched by the rope scaling flags' `rope`), read from the
    file's header (no weights): the model's own at most. model: a catalog name or a path."""
    from hearth.loader.context import context_to_run
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.loader.resolve import resolve_model
    from hearth.memory.gguf_shape import run_context

    trained = run_context(GGUFFile(resolve_model(model)), rope)
    return context_to_run(ctx, trained, quiet=True), trained  # LLM says it once, as it loads


def conversation(args: argparse.Namespace, llm) -> tuple[bool, str | None]:
    """(chat, else complete text; the line to say once when the model's own template is not what
    runs). llama-cli's rule: chat only when the GGUF has a template, unless -cnv / -no-cnv say."""
    own = not llm.chat_template.is_fallback
    if args.mode == "text" or own:
        return args.mode != "text", None
    if args.mode == "chat":
        return True, f"hearth: {args.model} has no chat template: chatting in a built-in one for {llm.gguf.arch}"
    what = "the prompt" if args.prompt else "each line, on its own,"
    return False, f"hearth: {args.model} has no chat template: completing {what} as text (--chat to chat in a built-in one)"
