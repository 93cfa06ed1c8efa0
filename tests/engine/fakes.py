"""A runner and tokenizer with exact, model-free behaviour for engine tests."""

from hearth.runner.messages import RunnerOutput, SampledToken, SchedulerOutput
from hearth.spec_decode.proposer import Proposer
from hearth.spec_decode.tree import DraftTree


class CountingRunner:
    """Next token = (last token + 1) % vocab; records every SchedulerOutput it receives.
    Drafts are verified by the same rule: accepted while each is its predecessor + 1, then the
    bonus token follows the last accepted one; in a tree (spec_parents), the first child that is
    its parent + 1 at each level."""

    def __init__(self, vocab: int = 50):
        self.vocab = vocab
        self.steps: list[SchedulerOutput] = []

    def execute(self, so: SchedulerOutput) -> RunnerOutput:
        self.steps.append(so)
        sampled, accepted = {}, {}
        for s in so.seqs:
            if not s.sample:
                continue
            last, ok, at = s.token_ids[-1], [], -1
            parents = s.spec_parents or list(range(-1, len(s.spec_token_ids) - 1))
            while True:
                nxt = next((c for c, p in enumerate(parents)
                            if p == at and s.spec_token_ids[c] == (last + 1) % self.vocab), None)
                if nxt is None:
                    break
                last, at = s.spec_token_ids[nxt], nxt
                ok.append(SampledToken(last))
            if s.spec_token_ids:
                accepted[s.request_id] = ok
            sampled[s.request_id] = SampledToken((last + 1) % self.vocab)
        return RunnerOutput(sampled, accepted=accepted)


class ScriptedProposer(Proposer):
    """Drafts from a function of the request (tests plant right and wrong drafts); unless obey_k,
    whatever length the policy asks for (the scheduler must trim what does not fit)."""

    def __init__(self, fn, obey_k: bool = False):
        super().__init__(None)
        self.fn, self.obey_k = fn, obey_k

    def propose(self, requests, num_tokens):
        return {r.request_id: _cut(self.fn(r), k) if self.obey_k else self.fn(r) for r, k in zip(requests, num_tokens)}


def _cut(drafts, k):
    """A chain's first k tokens, or a tree's first k nodes (a tree too)."""
    if isinstance(drafts, DraftTree):
        return DraftTree(drafts.tokens[:k], drafts.parents[:k])
    return drafts[:k]


class LetterTokenizer:
    """Token i decodes to one letter; token 0 is the end of generation."""

    eog_ids = {0}

    def token_to_bytes(self, i: int, skip_special_tokens: bool = False) -> bytes:
        return b"" if i == 0 and skip_special_tokens else bytes([ord("a") + i % 26])
