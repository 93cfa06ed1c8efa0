"""Fill-in-the-middle on Qwen2.5-Coder-0.5B, in process: greedy, 12 tokens, the body of a function
between its signature and a `return` of a name that only the suffix holds. The model writes that name
first only if the prompt put the suffix where its FIM training did (measured 2026-12-06:
'mean_value = sum(numbers) / len(numbers)\\n    return'); both routes run the same layout."""

from __future__ import annotations

PREFIX = "def average(numbers):\n    "
SUFFIX = "\n    return mean_value\n"


def test_the_middle_uses_the_suffix(qwen_client):
    r = qwen_client.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12,
                                          "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["content"].startswith("mean_value =") and "sum(numbers)" in body["content"], body["content"]
    assert body["prompt"].endswith(f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>")
    r = qwen_client.post("/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 12, "temperature": 0})
    text = r.json()["choices"][0]["text"]
    assert text.startswith("mean_value =") and "sum(numbers)" in text, text
