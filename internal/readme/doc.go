// Package readme holds no code: its test type-checks every Go block of the
// repository's README.md against the library, so that the README cannot
// drift from the API. See readme_test.go for the conventions a block
// follows.
package readme
