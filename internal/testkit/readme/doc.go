// Package readme holds no code: its tests type-check every Go block of
// the repository's README.md and of the pages under docs/ against the
// library, so that the documentation cannot drift from the API, and check
// that their relative links and anchors lead somewhere. See readme_test.go
// for the conventions a block follows, links_test.go for the links.
package readme
