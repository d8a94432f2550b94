// Package llm is the model layer of the bookkeeper example agent.
//
// It defines the chat-completions data model shared by the agent and its
// model back-ends (Message, ToolCall, Tool, Request, Response and the Model
// interface, all shaped like the OpenAI chat-completions API), the tool
// definitions the bookkeeping agent offers to a model (BookkeeperTools), and
// two Model implementations:
//
//   - RuleModel, a deterministic, offline model that understands everyday
//     Chinese and English bookkeeping phrases ("中午吃粉花了 35",
//     "taxi 18 yesterday", "how much did I spend today") by keyword rules.
//     It turns them into tool calls and summarises the tool results. It is
//     meant for demos and tests, where no network or API key is available.
//   - OpenAIClient, an HTTP client for any OpenAI-compatible
//     /chat/completions endpoint, with per-attempt timeouts, bounded
//     exponential back-off and typed errors.
//
// The package uses only the standard library.
package llm
