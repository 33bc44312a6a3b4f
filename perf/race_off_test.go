//go:build !race

package perf

// raceEnabled: under the race detector the in-process broker and the
// clients run several times slower, so timing-bound checks allow for it.
const raceEnabled = false
