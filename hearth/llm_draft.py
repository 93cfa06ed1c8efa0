"""The speculative draft model's setup, for LLM: its file (the vocabulary checked against the target's),
its weights (re-encoded at draft_quant), its module, its reduced head (draft_vocab), and the step cost's
prior for the method. Each bad value is an InvalidSpeculativeConfig naming its field, raised before the
target's weights load where it can be."""

from __future__ import annotations

import logging

from hearth.errors import HearthError
from hearth.loader.gguf_loader import GGUFFile, head_tensor
from hearth.loader.resolve import resolve_model
from hearth.loader.tokenizer import Tokenizer
from hearth.loader.vocab import read_vocab, vocab_difference
from hearth.models.registry import load_model
from hearth.openmp import one_thread
from hearth.runner.draft_quant import requantized
from hearth.runner.draft_vocab import DraftVocab
from hearth.spec_decode.config import DEFAULT_DRAFT_VOCAB, InvalidSpeculativeConfig, SpeculativeConfig
from hearth.spec_decode.cost import StepCost
from hearth.spec_decode.thresholds import POLICY

log = logging.getLogger("hearth")


def step_cost(spec: SpeculativeConfig, passes: tuple[int, int, int]) -> StepCost:
    """A draft token's cost, measured on this engine's steps from a prior for the method."""
    if spec.method in ("draft", "mtp"):  # a forward per draft token, as a draft model's
        return StepCost(POLICY.draft_model_token_cost, catch_up_prior=POLICY.draft_catch_up_cost, passes=passes)
    return StepCost(POLICY.draft_token_cost, passes=passes)


def draft_gguf(spec: SpeculativeConfig | None, target: Tokenizer) -> GGUFFile | None:
    """The draft model's file (method draft), once its vocabulary is checked to be the target's:
    the drafts are token ids the target scores, so both must mean the same strings by them."""
    if spec is None or spec.method != "draft":
        return None
    try:
        g = GGUFFile(resolve_model(spec.model))
        theirs = read_vocab(g).tokens
    except (HearthError, OSError, ValueError, KeyError) as e:
        raise InvalidSpeculativeConfig(f"speculative_config.model {spec.model!r}: {e}") from None
    if differ := vocab_difference(target.tokens, theirs):
        raise InvalidSpeculativeConfig(f"speculative_config.model: vocabulary differs from the target's {differ}")
    spec.check_draft_vocab(head_tensor(g).shape[0])  # before the load, as every other bad value
    return g


def draft_weights(spec: SpeculativeConfig | None, g: GGUFFile | None, backend) -> GGUFFile | None:
    """The draft's file seen re-encoded at speculative_config.draft_quant where that is set (only
    once speculation is known to run: the encoding is the load's slowest part)."""
    if g is None or not spec.draft_quant:
        return g
    log.info(f"draft {g.path.name}: matrices at {spec.draft_quant} (encoded at the first load, then cached)")
    return requantized(g, spec.draft_quant, backend)


def draft_model(g: GGUFFile, backend):
    """The draft model's (module, ModelConfig); its K/V comes later, in the target's block layout."""
    with one_thread():  # as for the target: repacking is many small ops
        try:
            model, cfg = load_model(g, backend)
        except HearthError as e:
            raise InvalidSpeculativeConfig(f"speculative_config.model: {e}") from None
    return model, cfg  # a recurrent draft's state is rolled back by the drafter (hearth.runner.draft_states)


KEPT_SPECIAL_MAX = 512
"""Special tokens past a reduced draft head scored on every draft step, at most (Qwen2.5: 22); past
this only the end-of-generation ones (gemma3 marks 6,176 there, mostly <unused*>: a dense matmul a step)."""


def draft_vocab(spec: SpeculativeConfig, g: GGUFFile, mc, backend, special: list[int], eog: set[int]
                 ) -> DraftVocab | None:
    """The draft's reduced head (speculative_config.draft_vocab; the special tokens kept), or None for
    the whole vocabulary."""
    head = head_tensor(g)
    size = spec.draft_vocab_for(head.shape[0], DEFAULT_DRAFT_VOCAB if backend.reduced_draft_head else 0)
    if not size:
        return None
    past = [i for i in special if i >= size]
    keep = special if len(past) <= KEPT_SPECIAL_MAX else sorted(eog)
    return DraftVocab(head, size, backend, mc.final_logit_softcap, keep=keep)
