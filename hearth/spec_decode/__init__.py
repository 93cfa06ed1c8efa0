"""Speculative decoding: proposers of draft tokens (one registry) and the policy that decides how
many each request gets. Pure Python, no torch: the engine calls it between steps; the runner
verifies the drafts (hearth.sample.speculative)."""
