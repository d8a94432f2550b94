package llm

import (
	"context"
	"encoding/json"
)

// Role is the author of a chat message.
type Role string

// The roles used in a chat-completions conversation.
const (
	// RoleSystem marks instructions for the model.
	RoleSystem Role = "system"
	// RoleUser marks a message written by the end user.
	RoleUser Role = "user"
	// RoleAssistant marks a message produced by the model.
	RoleAssistant Role = "assistant"
	// RoleTool marks the result of a tool call, sent back to the model.
	RoleTool Role = "tool"
)

// Message is one chat message. An assistant message carries either
// ToolCalls or a final Content; a tool message carries the result of the
// call named by ToolCallID in Content.
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCallTypeFunction is the only tool call (and tool) type in use.
const ToolCallTypeFunction = "function"

// ToolCall is a request by the model to run one tool.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // always "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function to call and its arguments.
type FunctionCall struct {
	Name string `json:"name"`
	// Arguments is a JSON object encoded as text.
	Arguments string `json:"arguments"`
}

// Tool describes a tool the model may call.
type Tool struct {
	Type     string      `json:"type"` // always "function"
	Function FunctionDef `json:"function"`
}

// FunctionDef is a function's name, description and JSON-schema parameters.
type FunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Request is one completion request: the conversation so far and the tools
// the model may call.
type Request struct {
	Messages []Message
	Tools    []Tool
}

// Response holds the assistant message produced for a Request: either one
// or more ToolCalls, or a final Content.
type Response struct {
	Message Message
}

// Model produces the next assistant message of a conversation.
// Implementations must be safe for concurrent use.
type Model interface {
	Complete(ctx context.Context, req Request) (Response, error)
}

// Names of the bookkeeping tools.
const (
	// ToolCreateTransaction records one income or expense.
	ToolCreateTransaction = "create_transaction"
	// ToolListCategories lists the available categories.
	ToolListCategories = "list_categories"
	// ToolListTransactions lists recorded transactions.
	ToolListTransactions = "list_transactions"
)

// Transaction types used in tool arguments and results.
const (
	// TypeIncome is money received.
	TypeIncome = "income"
	// TypeExpense is money spent.
	TypeExpense = "expense"
)

// DateLayout is the layout of every date in tool arguments ("YYYY-MM-DD").
const DateLayout = "2006-01-02"

// CreateTransactionArgs are the arguments of the create_transaction tool.
type CreateTransactionArgs struct {
	Type         string  `json:"type"`
	Amount       float64 `json:"amount"`
	CategoryName string  `json:"category_name,omitempty"`
	Note         string  `json:"note,omitempty"`
	OccurDate    string  `json:"occur_date,omitempty"`
}

// ListTransactionsArgs are the arguments of the list_transactions tool.
type ListTransactionsArgs struct {
	DateFrom string `json:"date_from,omitempty"`
	DateTo   string `json:"date_to,omitempty"`
	Type     string `json:"type,omitempty"`
}

const createTransactionSchema = `{
  "type": "object",
  "properties": {
    "type": {"type": "string", "enum": ["income", "expense"], "description": "Whether money was received (income) or spent (expense)."},
    "amount": {"type": "number", "exclusiveMinimum": 0, "description": "Positive amount in the ledger currency, e.g. 35 or 23.5."},
    "category_name": {"type": "string", "description": "Category name, e.g. 餐饮/Food, 交通/Transport, 工资/Salary. Omit to use the default category."},
    "note": {"type": "string", "description": "Free-text note, usually the user's original phrase."},
    "occur_date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$", "description": "Date of the transaction, YYYY-MM-DD. Omit for today."}
  },
  "required": ["type", "amount"],
  "additionalProperties": false
}`

const listCategoriesSchema = `{"type": "object", "properties": {}, "additionalProperties": false}`

const listTransactionsSchema = `{
  "type": "object",
  "properties": {
    "date_from": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$", "description": "First day to include, YYYY-MM-DD."},
    "date_to": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$", "description": "Last day to include, YYYY-MM-DD."},
    "type": {"type": "string", "enum": ["income", "expense"], "description": "Only list this type of transaction."}
  },
  "additionalProperties": false
}`

// BookkeeperTools returns the definitions of the three bookkeeping tools
// (create_transaction, list_categories, list_transactions) with JSON-schema
// parameters. It returns a fresh slice on every call.
func BookkeeperTools() []Tool {
	return []Tool{
		{Type: ToolCallTypeFunction, Function: FunctionDef{
			Name:        ToolCreateTransaction,
			Description: "Record one income or expense transaction in the user's ledger.",
			Parameters:  json.RawMessage(createTransactionSchema),
		}},
		{Type: ToolCallTypeFunction, Function: FunctionDef{
			Name:        ToolListCategories,
			Description: "List the categories transactions can be filed under.",
			Parameters:  json.RawMessage(listCategoriesSchema),
		}},
		{Type: ToolCallTypeFunction, Function: FunctionDef{
			Name:        ToolListTransactions,
			Description: "List recorded transactions, optionally filtered by date range (inclusive) and type.",
			Parameters:  json.RawMessage(listTransactionsSchema),
		}},
	}
}
