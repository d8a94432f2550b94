package llm

import (
	"encoding/json"
	"testing"
)

func TestBookkeeperTools(t *testing.T) {
	tools := BookkeeperTools()
	if len(tools) != 3 {
		t.Fatalf("got %d tools, want 3", len(tools))
	}
	want := map[string][]string{
		ToolCreateTransaction: {"type", "amount"},
		ToolListCategories:    nil,
		ToolListTransactions:  nil,
	}
	for _, tool := range tools {
		equal(t, tool.Type, "function", "tool type")
		req, ok := want[tool.Function.Name]
		if !ok {
			t.Errorf("unexpected tool %q", tool.Function.Name)
			continue
		}
		delete(want, tool.Function.Name)
		if tool.Function.Description == "" {
			t.Errorf("%s: empty description", tool.Function.Name)
		}
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(tool.Function.Parameters, &schema); err != nil {
			t.Fatalf("%s: parameters are not JSON: %v", tool.Function.Name, err)
		}
		equal(t, schema.Type, "object", tool.Function.Name+" schema type")
		equal(t, len(schema.Required), len(req), tool.Function.Name+" required count")
		for i := range req {
			equal(t, schema.Required[i], req[i], tool.Function.Name+" required")
		}
		for _, r := range req {
			if _, ok := schema.Properties[r]; !ok {
				t.Errorf("%s: required %q not in properties", tool.Function.Name, r)
			}
		}
	}
	if len(want) != 0 {
		t.Errorf("missing tools: %v", want)
	}
	// The whole tool list must encode as the API expects.
	b, err := json.Marshal(tools)
	if err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	fn := back[0]["function"].(map[string]any)
	if _, ok := fn["parameters"].(map[string]any); !ok {
		t.Errorf("parameters did not encode as a JSON object: %s", b)
	}
	// Fresh slice each call.
	tools[0].Function.Name = "changed"
	equal(t, BookkeeperTools()[0].Function.Name, ToolCreateTransaction, "first tool after mutation")
}

func TestMessageJSON(t *testing.T) {
	m := Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Type: "function", Function: FunctionCall{Name: "list_categories", Arguments: "{}"}}}}
	got := mustJSON(t, m)
	want := `{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"list_categories","arguments":"{}"}}]}`
	equal(t, got, want, "assistant message JSON")
	got = mustJSON(t, Message{Role: RoleTool, Content: `{"ok":true}`, ToolCallID: "call_1", Name: "list_categories"})
	want = `{"role":"tool","content":"{\"ok\":true}","tool_call_id":"call_1","name":"list_categories"}`
	equal(t, got, want, "tool message JSON")
}

func TestCategories(t *testing.T) {
	cats := Categories()
	if len(cats) < 9 {
		t.Fatalf("only %d categories", len(cats))
	}
	equal(t, cats[len(cats)-1], Category{Chinese: "其他", English: "Other"}, "last category")
	seen := map[string]bool{}
	for _, c := range cats {
		if c.Chinese == "" || c.English == "" {
			t.Errorf("category %+v lacks a name", c)
		}
		if seen[c.Chinese] || seen[c.English] {
			t.Errorf("duplicate category %+v", c)
		}
		seen[c.Chinese], seen[c.English] = true, true
	}
	for _, name := range []string{"餐饮", "Food", "交通", "Transport", "购物", "Shopping", "居住", "Housing", "娱乐", "Entertainment", "医疗", "Health", "工资", "Salary", "其他", "Other"} {
		if !seen[name] {
			t.Errorf("category %q missing", name)
		}
	}
}
