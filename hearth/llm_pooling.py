"""LLM's pooling calls (vLLM's llm.embed and llm.score): an embedding model's vectors and a reranker's pair
scores, each prompt run through LLM.generate with pooling params, its output read as vLLM's pooling output."""

from __future__ import annotations

from collections.abc import Callable

from hearth.engine.encoder_core import EmbeddingOnlyError, embedding_only
from hearth.engine.pairs import activated, not_a_reranker, pair_prompts, paired
from hearth.llm_prompts import PromptType
from hearth.outputs import EmbeddingOutput, EmbeddingRequestOutput, ScoringOutput, ScoringRequestOutput
from hearth.sampling_params import SamplingParams


class PoolingCalls:
    """LLM's embed() and score(), and which of them its model serves (a mixin: it reads LLM's model,
    model_config, tokenizer and max_model_len, and runs LLM.generate)."""

    @property
    def embeds_only(self) -> bool:
        """An encoder (bert, nomic-bert): it serves embed() and /v1/embeddings (a reranker: score() and
        /v1/rerank), never text."""
        return getattr(self.model, "embeds_only", False)

    @property
    def reranker(self) -> bool:
        """A reranker (its GGUF's pooling_type 4): score() pairs with its classification head (a decoder's: its
        rank head over the last token, hearth.models.rank_head), no embed() nor text."""
        return self.model_config.pooling == "rank"

    def embed(self, prompts: PromptType | list[PromptType], pooling: str | None = None, *,
              truncate_prompt_tokens: int | None = None, use_tqdm: bool | Callable = True) -> list[EmbeddingRequestOutput]:
        """One L2-normalized embedding per prompt, in order, as vLLM's llm.embed: `[i].outputs.embedding`,
        the prompt's final hidden states pooled as `pooling` says ("last", "mean"; None: the model's
        own, ModelConfig.pooling; an encoder's may also be "cls"). A decoder computes one token more for
        each prompt, which is dropped. truncate_prompt_tokens, use_tqdm: vLLM's, as generate's."""
        if self.reranker:
            raise EmbeddingOnlyError(embedding_only(self.model_config.arch, reranker=True))
        params = SamplingParams(max_tokens=1, temperature=0.0, pooling=pooling or self.model_config.pooling,
                                truncate_prompt_tokens=truncate_prompt_tokens)
        return [EmbeddingRequestOutput(r.request_id, r.prompt_token_ids, EmbeddingOutput(r.embedding))
                for r in self.generate(prompts, params, use_tqdm=use_tqdm)]

    def score(self, data_1: str | list[str], data_2: str | list[str], *, use_activation: bool = True,
              truncate_prompt_tokens: int | None = None, use_tqdm: bool | Callable = True) -> list[ScoringRequestOutput]:
        """A reranker's relevance of each pair, as vLLM's llm.score: `[i].outputs.score`. data_1 one text
        (scored against each of data_2) or as many as data_2 (zipped); each pair runs in the file's rerank template
        where it has one (Qwen3-Reranker's), else as [CLS] text_1 [SEP] text_2 [SEP] with token types 0 then 1
        (hearth.engine.pairs). use_activation False: the head's logit, not its sigmoid (a decoder reranker's
        sigmoid is llama.cpp's score, p("yes")). truncate_prompt_tokens k (-1: the context): a pair past k tokens
        loses its second text's last tokens; else it is a ValueError naming the pair and both numbers."""
        if not self.reranker:
            kind = "an embedding model" if self.embeds_only else "a text generation model"
            raise EmbeddingOnlyError(not_a_reranker(f"LLM.score: this model ({self.model_config.arch})", kind))
        room = self.max_model_len - (not self.embeds_only)  # a decoder computes one token past each pair
        ids, starts = pair_prompts(self.tokenizer, paired(data_1, data_2), truncate_prompt_tokens, room)
        prompts = [{"prompt_token_ids": p} for p in ids]
        params = [SamplingParams(max_tokens=1, temperature=0.0, pooling="rank", pair_start=s) for s in starts]
        return [ScoringRequestOutput(r.request_id, r.prompt_token_ids,
                                     ScoringOutput(activated(r.embedding[0], use_activation)))
                for r in self.generate(prompts, params, use_tqdm=use_tqdm)]
