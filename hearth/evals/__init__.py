"""Evaluations that drive a served model from outside, as a client would: `hearth eval tools`
(BFCL v4 tool calling, scored by hearth's own implementation of BFCL's rules)."""
