// Package mutate proves that signet's tests guard its safety rules. Each
// Mutation in a checked-in list breaks one rule with an exact text edit of
// one source file; Runner applies it, runs only the test named for it, and
// calls it caught only when that test fails printing the named assertion.
//
// It refuses a mutation whose target text does not occur exactly once (a
// list that no longer matches the code says so instead of silently testing
// nothing), and it never leaves a mutated file behind: the original bytes
// are restored after the test, on panic and on SIGINT/SIGTERM/SIGHUP, and
// checked by sha256. A file that someone else changed while it was mutated is
// not overwritten: the run stops and says where the original bytes were saved.
//
// With Overlay set, the tree is never written at all: the mutated file is
// handed to the go command through -overlay (in GOFLAGS, so that a go build
// the test runs sees it too), so others sharing the working tree never build
// a mutated package. Only .go files can be handed over that way: a test
// reads other files at run time, where -overlay does not reach.
//
// RunAll runs several mutations at once (Jobs): those of .go files only go
// through -overlay, each with its own TMPDIR; the others are applied in
// place, with no other mutation running. Each test's baseline (the run
// without the mutation, which must pass) runs from a test binary built once
// per package.
package mutate
