"""Image rows for a step: each scheduled sequence's MediaInputs encoded (once per digest) and placed
at their batch rows, for the model to write over the placeholder ids' embeddings
(CausalLM.forward's `embeds`); and the spans whose rows attend both ways (AttentionMetadata.bidirectional)."""

from __future__ import annotations

from collections import OrderedDict

import torch

from hearth.media.inputs import MediaInput
from hearth.runner.media_worker import EncodeWorker

MAX_UNUSED = 8
"""Encoded images kept beyond those a live request still reads (the same picture sent again soon)."""


class MediaRows:
    def __init__(self, vision, width: int, ahead: bool = True):
        """vision: has encode(pixels) -> [length, width] f32 (hearth.models.vision.VisionEncoder); width: the
        LM's hidden size, times 1 + its deepstack parts (Qwen3-VL's rows carry them: CausalLM.forward).
        ahead: images announced by `submit` are encoded on a background thread (EncodeWorker) while steps
        run; False: every image is encoded inside the step that first reads its rows (`encode`)."""
        self.vision, self.width = vision, width
        self.worker = EncodeWorker(self._encoded_rows) if ahead else None
        self.waiters: dict[bytes, list[tuple[str, MediaInput]]] = {}
        """digest -> (request id, image) of the live requests waiting for its job on the worker."""
        self._ready: dict[str, list[bytes]] = {}
        self._errors: dict[str, str] = {}
        self.encoded: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        """digest -> its rows [length, width] f32, least recently used first."""
        self.users: dict[str, set[bytes]] = {}
        """request id -> the digests of its images (their rows stay while it lives: a causal image cut by
        chunked prefill is encoded once)."""

    @torch.inference_mode()
    def encode(self, seqs: list) -> dict[str, str]:
        """Encode the images of the step's sequences before its batch is built, each request on its own:
        request id -> why one of its images failed (those requests leave the step; the others go on).
        An image not encoded ahead (ahead=False, or a caller that never submitted it) is encoded here, inside
        the engine step (as vLLM's model runner and llama-server's slot loop encode), one on the worker is
        waited for; either holds up the step's other sequences for its duration: a SmolVLM-256M-sized image
        (SigLIP 12 x 768, 512 px, 64 rows, F16 mmproj) took 4.5-6.9 s where a 4-sequence SmolLM2-135M decode
        step took 0.13-0.3 s (2026-12-07, 2 shared cores at load ~8: 30-64x a step; noisy)."""
        failed = {}
        for s in seqs:
            end = s.start_pos + len(s.token_ids)
            for m in s.media:
                if max(s.start_pos, m.offset) >= min(end, m.end):
                    continue
                try:
                    self._encode(m)
                except Exception as e:  # noqa: BLE001 - whatever the encoder raises ends this request only
                    failed[s.request_id] = (f"the image at prompt positions {m.offset}..{m.end - 1} could not "
                                            f"be encoded: {type(e).__name__}: {e}")
                    break
        return failed

    def submit(self, images: list[tuple[str, MediaInput]]) -> None:
        """Start encoding these (request id, image) on the worker, FCFS; an image encoded already (or being
        encoded for another request) is not encoded again. `report` says when each is ready."""
        for rid, m in images:
            self.users.setdefault(rid, set()).add(m.digest)
            if m.digest in self.encoded:
                self._ready.setdefault(rid, []).append(m.digest)
            elif m.digest in self.waiters:
                self.waiters[m.digest].append((rid, m))
                if not self.worker.join(m.digest, rid):  # its job went with an abort not yet forgotten here
                    self.worker.submit(m.digest, m, rid)
            else:
                self.waiters[m.digest] = [(rid, m)]
                self.worker.submit(m.digest, m, rid)

    @property
    def encoding(self) -> int:
        """Images submitted whose rows are not here yet."""
        return len(self.waiters)

    @property
    def has_news(self) -> bool:
        """Something for the next report without waiting (an image found encoded already, a failure)."""
        return bool(self._ready or self._errors)

    def report(self) -> tuple[dict[str, list[bytes]], dict[str, str]]:
        """(request id -> digests of its submitted images now encoded, request id -> why one of them
        could not be), since the last report."""
        self._absorb()
        out = self._ready, self._errors
        self._ready, self._errors = {}, {}
        return out

    def _absorb(self) -> None:
        """Take the worker's finished jobs: rows into the cache, each waiting request told."""
        for digest, result in self.worker.take() if self.worker is not None else ():
            waiting = self.waiters.pop(digest, [])
            if isinstance(result, BaseException):
                for rid, m in waiting:
                    self._errors[rid] = (f"the image at prompt positions {m.offset}..{m.end - 1} could not "
                                         f"be encoded: {type(result).__name__}: {result}")
                continue
            self.encoded[digest] = result
            for rid, _ in waiting:
                self._ready.setdefault(rid, []).append(digest)
        self._trim()

    def hand_over(self, new: MediaRows | None) -> None:
        """This encoder is replaced (ModelRunner.set_vision): its worker stops; the images requests still
        wait for, and what they were not told yet, go to `new` (its encoder encodes them)."""
        if self.worker is None:
            return
        self.worker.close()
        waiting = [w for ws in self.waiters.values() for w in ws]
        if new is None or new.worker is None:  # read in-step from now on: ready as far as the scheduler knows
            ready = new._ready if new is not None else {}
            for rid, m in waiting:
                ready.setdefault(rid, []).append(m.digest)
            waiting = []
        if new is not None:
            for rid, digests in self._ready.items():
                new._ready.setdefault(rid, []).extend(digests)
            new._errors.update(self._errors)
            new.submit(waiting)

    def rows(self, seqs: list, qsl: list[int]) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(batch rows [R] int64, their values [R, width] f32) for every media row among the step's
        tokens (sequence i's token j is batch row qsl[i] + j); None when there are none."""
        at, values = [], []
        for i, s in enumerate(seqs):
            start, end = s.start_pos, s.start_pos + len(s.token_ids)
            for m in s.media:
                a, b = max(start, m.offset), min(end, m.end)  # the positions of its rows in this chunk
                if a >= b:
                    continue
                self.users.setdefault(s.request_id, set()).add(m.digest)
                values.append(self._encode(m)[a - m.offset:b - m.offset])
                at.append(torch.arange(qsl[i] + a - start, qsl[i] + b - start))
        if not at:
            return None
        self._trim()
        return torch.cat(at), torch.cat(values)

    @staticmethod
    def bidirectional(seqs: list) -> dict[int, list[tuple[int, int]]]:
        """Sequence -> its spans whose rows attend both ways (each whole in this step: the scheduler's rule)."""
        out = {}
        for i, s in enumerate(seqs):
            spans = [(m.offset, m.end) for m in s.media if m.bidirectional]
            for a, b in spans:
                if a < s.start_pos or b > s.start_pos + len(s.token_ids):
                    raise RuntimeError(f"{s.request_id}: bidirectional rows {a}..{b - 1} cut by the chunk "
                                       f"at {s.start_pos}..{s.start_pos + len(s.token_ids) - 1}")
            if spans:
                out[i] = spans
        return out

    def abort(self, request_id: str) -> None:
        """The request was aborted: its queued encodes that no other request waits for are dropped now, from the
        abort's own thread, before the worker can start them (its end reaches `forget` only at the engine's next
        step, after the step that runs now, which may be long). Thread-safe: touches the worker alone."""
        if self.worker is not None:
            self.worker.abort(request_id)

    def forget(self, request_id: str) -> None:
        """A request ended: its images are kept only among the MAX_UNUSED most recent unused ones; its
        queued encodes that no other request waits for are dropped."""
        self._ready.pop(request_id, None)
        self._errors.pop(request_id, None)
        self.abort(request_id)  # the worker's side: it waits for no job any more
        for digest in list(self.waiters):
            left = self.waiters[digest] = [(rid, m) for rid, m in self.waiters[digest] if rid != request_id]
            if not left and self.worker.drop(digest):
                del self.waiters[digest]
        if self.users.pop(request_id, None) is not None:
            self._trim()

    def _encode(self, m: MediaInput) -> torch.Tensor:
        if m.digest not in self.encoded and m.digest in self.waiters:  # on the worker: wait for it, not again
            self.worker.wait(digest=m.digest)
            self._absorb()
        rows = self.encoded.get(m.digest)
        if rows is None:
            rows = self.encoded[m.digest] = self._encoded_rows(m)
        self.encoded.move_to_end(m.digest)
        return rows

    @torch.inference_mode()
    def _encoded_rows(self, m: MediaInput) -> torch.Tensor:
        rows = self.vision.encode(m.pixels).float()
        if tuple(rows.shape) != (m.length, self.width):
            raise ValueError(f"the vision encoder made rows {tuple(rows.shape)} for an image of {m.length} "
                             f"rows; the model takes rows {self.width} wide")
        return rows

    def _trim(self) -> None:
        """Drop the least recently used images no live request reads, past MAX_UNUSED of them."""
        live = set().union(*self.users.values()) if self.users else set()
        unused = [d for d in self.encoded if d not in live and d not in self.waiters]
        for d in unused[:max(0, len(unused) - MAX_UNUSED)]:
            del self.encoded[d]
