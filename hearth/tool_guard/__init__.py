"""Server-side reliability for tool-calling agents (issue 20): modules that look at the offered
tools, the conversation and the model's output, and report what they did as GuardEvent records."""
