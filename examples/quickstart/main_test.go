package main

// README's quick start (its first Go block is this directory's main.go,
// byte for byte: internal/testkit/readme checks that), run as it stands.
func Example() {
	main()
	// Output:
	// booked: lunch 12
	// booked: lunch 12 (replayed: true)
	// succeeded
}
