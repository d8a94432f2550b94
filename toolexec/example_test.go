package toolexec_test

import (
	"errors"
	"fmt"

	"github.com/rowlease/rowlease/toolexec"
)

// Tool arguments that mean the same call canonicalize to the same bytes
// and hash, however the model spelled them.
func ExampleCanonicalArguments() {
	a, hashA, _ := toolexec.CanonicalArguments([]byte(`{"type":"expense","amount":35.0,"meta":{"z":1,"a":[1e0,"x"]}}`))
	b, hashB, _ := toolexec.CanonicalArguments([]byte(`{ "meta": {"a": [1, "x"], "z": 1.0}, "amount": 3.5e1, "type": "expense" }`))
	fmt.Println(string(a))
	fmt.Println(string(b))
	fmt.Println(hashA == hashB)
	_, _, err := toolexec.CanonicalArguments([]byte(`["not", "an", "object"]`))
	fmt.Println(errors.As(err, new(*toolexec.ArgumentsError)))
	// Output:
	// {"amount":35,"meta":{"a":[1,"x"],"z":1},"type":"expense"}
	// {"amount":35,"meta":{"a":[1,"x"],"z":1},"type":"expense"}
	// true
	// true
}
