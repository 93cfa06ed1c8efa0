"""A runner and tokenizer with exact, model-free behaviour for engine tests."""

from hearth.runner.messages import RunnerOutput, SampledToken, SchedulerOutput


class CountingRunner:
    """Next token = (last token + 1) % vocab; records every SchedulerOutput it receives."""

    def __init__(self, vocab: int = 50):
        self.vocab = vocab
        self.steps: list[SchedulerOutput] = []

    def execute(self, so: SchedulerOutput) -> RunnerOutput:
        self.steps.append(so)
        return RunnerOutput({s.request_id: SampledToken((s.token_ids[-1] + 1) % self.vocab)
                             for s in so.seqs if s.sample})


class LetterTokenizer:
    """Token i decodes to one letter; token 0 is the end of generation."""

    eog_ids = {0}

    def token_to_bytes(self, i: int, skip_special_tokens: bool = False) -> bytes:
        return b"" if i == 0 and skip_special_tokens else bytes([ord("a") + i % 26])
