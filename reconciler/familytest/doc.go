// Package familytest proves that a backend family plugs into the
// reconciler with one registration and no change to its core: its test
// registers a toy family and runs a request through it end to end. It has
// no code of its own and refuses to grow any: helpers belong to the
// packages they help.
package familytest
